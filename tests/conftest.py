import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def skip_unless_sm90(what: str) -> None:
    """Skip the calling test unless GPU 0 is sm90 (`what` is built for it: "the kernel", "the spec")."""
    import torch
    if not torch.cuda.is_available():               # (gpu-marked tests are skipped without a GPU already)
        pytest.skip("needs a CUDA GPU")
    cap = torch.cuda.get_device_capability(0)
    if cap != (9, 0):
        pytest.skip(f"{what} is built for sm90; this GPU is sm{cap[0]}{cap[1]}")


def postgres_test_url() -> str:
    """The PostgreSQL database the storage tests use: GLUON_TEST_POSTGRES_URL (`.ci/postgres.sh start DIR`
    starts a server and prints one). Without it the test is skipped, except in CI (CI or
    GLUON_TEST_REQUIRE_POSTGRES set, as .ci/run does), where it fails: a green CI must have run them."""
    url = os.environ.get("GLUON_TEST_POSTGRES_URL")
    if url:
        return url
    why = "GLUON_TEST_POSTGRES_URL is not set (.ci/postgres.sh start DIR starts a server and prints one)"
    if any(os.environ.get(v, "").lower() not in ("", "0", "false") for v in ("CI", "GLUON_TEST_REQUIRE_POSTGRES")):
        pytest.fail(f"the PostgreSQL tests must run in CI: {why}")
    pytest.skip(why)


@pytest.hookimpl(tryfirst=True)      # before xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        # with `-n auto --dist loadgroup` (README's command) the GPU tests share one worker: one GPU, one process
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(pytest.mark.xdist_group("gpu"))
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Every test compiles into a session-private cache, never the user's."""
    root = tmp_path_factory.getbasetemp() / "gluon-cache"
    monkeypatch.setenv("GLUON_CACHE_DIR", str(root))


@pytest.fixture
def interpret_env():
    """Ordinary launches (a host function's `kernel[grid](...)`, the shipped kernels' host functions) run in the
    CPU interpreter for the test, as with GLUON_INTERPRET=1 at import."""
    from gluon.interpret import set_enabled
    was = set_enabled(True)
    yield
    set_enabled(was)
