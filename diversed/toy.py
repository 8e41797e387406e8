"""`python -m diversed.toy`: build (or reuse) the toy pair and print its report (`diversed.models.toy`)."""

from diversed.models.toy import main

if __name__ == "__main__":
    raise SystemExit(main())
