"""Server URLs on a port where nothing listens (port 1): every connection is refused."""

CLOSED_REDIS_URL = "redis://127.0.0.1:1/0"
CLOSED_DATABASE_URL = "postgresql+psycopg://postgres@127.0.0.1:1/nothing"
