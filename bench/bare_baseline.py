"""The bare baseline: plain `requests` paging and `json.dumps` per record to stdout, no SDK.

Pages each list endpoint with per_page=200 until meta.last_page (spec 4.3) and writes one
Singer-shaped RECORD line per row, so the benchmark's counting sink reads it like the tap's output.

    python bench/bare_baseline.py --base-url URL --api-key KEY [--streams guests,members]
"""

from __future__ import annotations

import argparse
import json
import sys

import requests

from harness import LIST_ENDPOINTS, PER_PAGE_MAX


def read_all(session: requests.Session, base_url: str, stream: str, path: str) -> int:
    write = sys.stdout.write
    page, last_page, rows = 1, 1, 0
    while page <= last_page:
        response = session.get(f"{base_url}{path}", params={"per_page": PER_PAGE_MAX, "page": page})
        response.raise_for_status()
        body = response.json()
        for record in body["data"]:
            write(json.dumps({"type": "RECORD", "stream": stream, "record": record}) + "\n")
        rows += len(body["data"])
        last_page = body["meta"]["last_page"]
        page += 1
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--api-key", required=True)
    parser.add_argument("--streams", default=",".join(LIST_ENDPOINTS))
    args = parser.parse_args()
    session = requests.Session()
    session.headers.update({"Authorization": f"Bearer {args.api_key}"})
    counts = {
        stream: read_all(session, args.base_url.rstrip("/"), stream, LIST_ENDPOINTS[stream])
        for stream in args.streams.split(",")
    }
    sys.stdout.flush()
    print(json.dumps({"records": counts}), file=sys.stderr)


if __name__ == "__main__":
    main()
