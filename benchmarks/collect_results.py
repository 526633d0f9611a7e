"""Assemble benchmarks/RESULTS.md from the per-benchmark files in benchmarks/results/.

Each benchmark script writes its own markdown (with the command that reproduces it); this only
concatenates them under one header.

    .venv/bin/python benchmarks/collect_results.py
"""

import pathlib
import platform

HERE = pathlib.Path(__file__).resolve().parent


def write_report(path, text: str) -> None:
    """Write one benchmark's markdown to ``path``, creating its folder (every script's last step)."""
    import os

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text)


def main():
    parts = [
        "# Benchmark results",
        "",
        "Every comparison runs the peers side by side in one process or one run, so the ratios hold "
        "even where absolute times vary; thread limits (OMP_NUM_THREADS=1, single-threaded XLA) for "
        f"fair CPU runs. Machine of the last collection: {platform.machine()}, "
        f"{platform.python_implementation()} {platform.python_version()}, 2 cores. "
        "No GPU was available for these runs.",
        "",
    ]
    for path in sorted((HERE / "results").glob("*.md")):
        parts += [path.read_text().strip(), ""]
    (HERE / "RESULTS.md").write_text("\n".join(parts))
    print(f"wrote {HERE / 'RESULTS.md'}")


if __name__ == "__main__":
    main()
