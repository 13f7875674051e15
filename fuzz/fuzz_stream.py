"""atheris harness: stream (input layout in fuzz/targets.py)."""

from harness import main

if __name__ == "__main__":
    main("stream")
