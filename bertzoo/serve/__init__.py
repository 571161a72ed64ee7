"""`bertzoo serve`: a model behind HTTP (FastAPI + uvicorn) with dynamic batching: `/predict`, `/embed`,
`/generate`, `/health` and `/ready` (docs/serving.md)."""
