"""The API's rules on the wire, shared by every stream: auth (the key pool's SDK authenticator),
the rate limiter and shared budget, paging, and the error-code policy."""
