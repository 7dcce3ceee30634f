"""The dlt contender: dlt's `rest_api` source over the same list endpoints, loaded into a local
`filesystem` destination as uncompressed JSONL (dlt's default file format for that destination).

Runs in the separate virtualenv `bench/.venv-dlt` (made by `harness.ensure_dlt_venv`):

    bench/.venv-dlt/bin/python bench/dlt_baseline.py --base-url URL --api-key KEY \
        --workdir DIR --summary FILE [--streams guests,members]

Paging: page-number paginator (page=1..), stopping at meta.last_page (spec 4.3), per_page=200,
records under `data`, bearer auth (spec 5.1). Writes {"records": {stream: rows}} to --summary,
counted by dlt's normalizer (top-level tables only; nested lists become child tables).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from harness import LIST_ENDPOINTS, PER_PAGE_MAX

# No network beyond the sandbox, and JSONL as plain text like the tap's output.
os.environ.setdefault("RUNTIME__DLTHUB_TELEMETRY", "false")
os.environ.setdefault("DATA_WRITER__DISABLE_COMPRESSION", "true")

import dlt
from dlt.sources.rest_api import rest_api_source


def build_source(base_url: str, api_key: str, streams: list[str]) -> Any:
    return rest_api_source(
        {
            "client": {
                "base_url": base_url.rstrip("/") + "/",
                "auth": {"type": "bearer", "token": api_key},
                "paginator": {
                    "type": "page_number",
                    "base_page": 1,
                    "page_param": "page",
                    "total_path": "meta.last_page",
                },
            },
            "resource_defaults": {
                "write_disposition": "replace",
                "endpoint": {"params": {"per_page": PER_PAGE_MAX}, "data_selector": "data"},
            },
            "resources": [
                {"name": stream, "endpoint": {"path": LIST_ENDPOINTS[stream].lstrip("/")}}
                for stream in streams
            ],
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--api-key", required=True)
    parser.add_argument("--workdir", required=True, type=Path)
    parser.add_argument("--summary", required=True, type=Path)
    parser.add_argument("--streams", default=",".join(LIST_ENDPOINTS))
    args = parser.parse_args()
    streams = args.streams.split(",")
    pipeline = dlt.pipeline(
        pipeline_name="bench_guestdata",
        pipelines_dir=str(args.workdir / "pipelines"),
        destination=dlt.destinations.filesystem(bucket_url=(args.workdir / "lake").as_uri()),
        dataset_name="guestdata",
    )
    pipeline.run(build_source(args.base_url, args.api_key, streams), loader_file_format="jsonl")
    row_counts = pipeline.last_trace.last_normalize_info.row_counts
    counts = {stream: row_counts.get(stream, 0) for stream in streams}
    args.summary.write_text(json.dumps({"records": counts, "tables": row_counts}))


if __name__ == "__main__":
    main()
