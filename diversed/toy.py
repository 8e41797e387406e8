"""`python -m diversed.toy`: build (or reuse) the toy pair and print its report (`diversed.models.toy`)."""

from diversed.models.toy import load_toy_pair, main  # noqa: F401 (configs from before models/ name the loader here)

if __name__ == "__main__":
    raise SystemExit(main())
