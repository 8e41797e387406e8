"""`python -m diversed.toy`: rebuild the toy pair (or reuse a cached rebuild), print its report and
whether it is the shipped pair (`diversed.models.toy`)."""

from diversed.models.toy import load_toy_pair, main  # noqa: F401 (configs from before models/ name the loader here)

if __name__ == "__main__":
    raise SystemExit(main())
