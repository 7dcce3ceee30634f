"""The stream and its parts: `base.GuestDataStream`, the SDK's hooks, each delegating to a part
declared on the stream (transport, window, resume, deletions, prefetch, planning, the read loop,
drift). The parts see the stream only through `host`'s protocol, so none imports `base`."""
