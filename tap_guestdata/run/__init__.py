"""What every stream of one run shares: settings, the runtime (key pool, workers, counters),
the catalog of streams, progress lines, the Singer writer, the resume markers in state and the
rules of time (London days, UTC bookmarks)."""
