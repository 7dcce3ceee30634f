"""HTTP rules shared by every stream: the rate limiter and key pool, the error-code policy."""
