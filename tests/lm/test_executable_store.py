"""The executable store (`jaxeval.lm.executable_store`): a later process loads what XLA
compiled without tracing or lowering it, only under a fingerprint of everything that decides the
program, and never keeps a copy that would fail when run."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from jaxeval.lm import executable_store as es
from jaxeval.lm.executable_store import ExecutableStore, Undescribed, describe
from jaxeval.lm.executables import Executables, Job
from jaxeval.models.layers import norm
from jaxeval.platform import compile_cache


def _norm_job(eps: float = 1e-6, n: int = 4, key="norm") -> Job:
    p = {"scale": jax.ShapeDtypeStruct((8,), np.float32)}
    x = jax.ShapeDtypeStruct((n, 8), np.float32)
    return Job(key, functools.partial(norm, kind="rms", eps=eps), (p, x))


@pytest.fixture
def cache(tmp_path):
    path = compile_cache.enable(str(tmp_path / "xla"))
    try:
        yield path
    finally:
        compile_cache.enable("off")


def _args(n: int = 4):
    rng = np.random.default_rng(0)
    p = {"scale": rng.standard_normal(8).astype(np.float32)}
    return p, rng.standard_normal((n, 8)).astype(np.float32)


def test_a_fresh_process_loads_what_xla_compiled(cache):
    exe = Executables(store=True)
    out = np.asarray(exe.get(_norm_job())(*_args()))
    assert exe.stats()["compilations"] == 1 and exe.store_loads == 0
    store = ExecutableStore.for_compile_cache()
    assert len(list(store.root.glob("*.exe"))) == 1
    jax.clear_caches()  # as a new process would start: only the files
    again = Executables(store=True)
    loaded = again.get(_norm_job())
    assert again.store_loads == 1 and again.compilations == 0 and again.cache_hits == 1
    np.testing.assert_array_equal(np.asarray(loaded(*_args())), out)


def test_another_program_is_another_entry(cache):
    store = ExecutableStore.for_compile_cache()
    base = store.fingerprint(_norm_job(), None)
    assert base is not None and base == store.fingerprint(_norm_job(), None)
    changed = [
        _norm_job(eps=1e-5),  # a value the function closes over
        _norm_job(n=5),  # an argument's shape
        _norm_job(key="other"),  # the job's name
    ]
    prints = {store.fingerprint(job, None) for job in changed}
    assert base not in prints and len(prints) == len(changed)
    assert store.fingerprint(_norm_job(), {"xla_cpu_enable_fast_math": True}) != base
    assert not list(store.root.glob("*.exe"))  # fingerprints write nothing


def test_what_it_cannot_vouch_for_is_not_stored(cache):
    store = ExecutableStore.for_compile_cache()
    x = jax.ShapeDtypeStruct((4, 8), np.float32)
    assert store.fingerprint(Job("t", lambda a: a * 2, (x,)), None) is None  # not jaxeval's code

    class Foreign:  # an object of a class outside jaxeval, in a closure
        eps = 1e-6

    job = Job("f", functools.partial(norm, kind="rms", eps=Foreign()), ({"scale": x}, x))
    assert store.fingerprint(job, None) is None
    with pytest.raises(Undescribed):
        describe(np.zeros(1 << 20, np.float32))  # too large to hash by content

    def private(a):
        return a

    private.__module__ = "_a_users_module"  # a leading underscore is not a library
    with pytest.raises(Undescribed):
        describe(private)
    exe = Executables(store=True)
    exe.get(Job("t", lambda a: a * 2, (x,)))
    assert exe.compilations == 1 and not store.root.exists()


def test_described_values():
    @dataclasses.dataclass(frozen=True)
    class Local:
        a: int

    assert describe((1, 2.0, "x", None)) == describe((1, 2.0, "x", None))
    assert describe((1, 2.0)) != describe((1, 2))  # an int is not a float
    assert describe({"b": 1, "a": 2}) == describe({"a": 2, "b": 1})
    assert describe(np.arange(3)) != describe(np.arange(3) + 1)
    with pytest.raises(Undescribed):
        describe(Local(1))  # a class outside jaxeval


def test_an_executable_from_jax_cache_is_stored_from_its_bytes(cache):
    """A program JAX's persistent cache already holds (the store's entry gone, or a fingerprint
    that changed while the program did not) is stored from the bytes that cache read, not
    serialized again from the loaded executable (XLA:CPU would write it without its code), and
    the next run loads it from the store."""
    out = np.asarray(Executables(store=True).get(_norm_job())(*_args()))
    store = ExecutableStore.for_compile_cache()
    for path in store.root.glob("*.exe"):
        path.unlink()
    jax.clear_caches()
    exe = Executables(store=True)
    run = exe.get(_norm_job())
    assert exe.cache_hits == 1 and exe.store_loads == 0 and exe.compilations == 0
    assert len(list(store.root.glob("*.exe"))) == 1
    np.testing.assert_array_equal(np.asarray(run(*_args())), out)
    jax.clear_caches()
    again = Executables(store=True)
    loaded = again.get(_norm_job())
    assert again.store_loads == 1 and again.compilations == 0
    np.testing.assert_array_equal(np.asarray(loaded(*_args())), out)


def test_cache_reads_are_seen_on_their_own_thread_only(cache):
    Executables(store=False).get(_norm_job(eps=5e-6))
    jax.clear_caches()
    job = _norm_job(eps=5e-6)
    with es.cache_reads() as read:
        job.lower().compile()
    assert len(read) == 1 and isinstance(read[0], bytes)
    jax.clear_caches()
    with es.cache_reads() as read:
        import threading

        t = threading.Thread(target=lambda: job.lower().compile())
        t.start()
        t.join()
    assert read == []  # another thread's read is not this one's


def test_a_damaged_entry_is_compiled_over(cache):
    exe = Executables(store=True)
    job = _norm_job(eps=3e-6)
    exe.get(job)
    store = ExecutableStore.for_compile_cache()
    digest = store.fingerprint(job, None)
    (store.root / f"{digest}.exe").write_bytes(b"not an executable")
    assert store.load(digest, job.args) is None and not (store.root / f"{digest}.exe").exists()
    jax.clear_caches()
    again = Executables(store=True)
    run = again.get(job)
    assert again.store_loads == 0 and again.cache_hits == 1  # JAX's cache, lowered as before
    np.asarray(run(*_args()))
    assert (store.root / f"{digest}.exe").exists()  # and kept again, from that cache's bytes


def test_switched_off(cache, monkeypatch):
    monkeypatch.setenv(es.ENV_VAR, "off")
    assert ExecutableStore.for_compile_cache() is None
    monkeypatch.delenv(es.ENV_VAR)
    compile_cache.enable("off")
    assert ExecutableStore.for_compile_cache() is None  # no compilation cache: no store


def test_a_second_process_runs_the_stored_program(tmp_path):
    """Processes as runs: the second loads the first one's executable (nothing lowered) and gets
    the same numbers; with the store emptied, the third loads from JAX's cache and keeps that
    cache's bytes, which the fourth runs (a copy serialized from the loaded executable would fail
    there: XLA:CPU writes it without its code)."""
    script = textwrap.dedent(
        """
        import functools, sys, json
        import jax, numpy as np
        from jaxeval.lm.executables import Executables, Job
        from jaxeval.models.layers import norm
        from jaxeval.platform import compile_cache
        compile_cache.enable(sys.argv[1])
        x = jax.ShapeDtypeStruct((4, 8), np.float32)
        p = {"scale": jax.ShapeDtypeStruct((8,), np.float32)}
        job = Job("n", functools.partial(norm, kind="rms", eps=1e-6), (p, x))
        exe = Executables(store=True)
        rng = np.random.default_rng(0)
        out = exe.get(job)({"scale": np.ones(8, np.float32)}, rng.standard_normal((4, 8), np.float32))
        print(json.dumps({"loads": exe.store_loads, "out": np.asarray(out).tolist()}))
        """
    )
    env = {k: v for k, v in os.environ.items() if k != es.ENV_VAR}
    runs = []
    for i in range(4):
        if i == 2:
            for path in (tmp_path / "xla" / es.SUBDIR).glob("*.exe"):
                path.unlink()
        done = subprocess.run(
            [sys.executable, "-c", script, str(tmp_path / "xla")],
            capture_output=True, text=True, env=env, check=True,
        )  # fmt: skip
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert [r["loads"] for r in runs] == [0, 1, 0, 1]
    assert all(r["out"] == runs[0]["out"] for r in runs)


def test_a_second_adapter_loads_every_scoring_and_generation_executable(tmp_path):
    """The scorer's buckets and the generation engine's pieces (admission, decode, host read,
    tail moves) are all jaxeval's code over described values: a second adapter on the same cache
    loads each of them from the store (nothing lowered) and answers the same."""
    from jaxeval.lm.jax_lm import JaxLM
    from jaxeval.models import load_model
    from jaxeval.platform.mesh import make_mesh
    from tests.helpers.tiny_models import tiny_checkpoint
    from tests.lm.conftest import our_instances

    loaded = load_model(tiny_checkpoint("llama"), mesh=make_mesh("single"), dtype="float32")
    scored = our_instances("loglikelihood", [("The cat sat on", " the mat"), ("A", " b c")])
    prompts = [("Hello there", {"max_gen_toks": 5}), ("Once", {"max_gen_toks": 3})]
    asked = our_instances("generate_until", prompts)

    def run():
        lm = JaxLM(pretrained=loaded, max_length=64, compilation_cache=str(tmp_path / "xla"))
        out = (
            lm.loglikelihood(scored, disable_tqdm=True),
            lm.generate_until(asked, disable_tqdm=True),
        )
        return lm, out

    try:
        _, first = run()
        jax.clear_caches()
        warm, second = run()
    finally:
        compile_cache.enable("off")
    assert second == first
    for exe in (warm.scorer.executables, warm.generator.executables):
        stats = exe.stats()
        assert stats["compile_count"] > 0 and stats["compilations"] == 0
        assert stats["store_loads"] == stats["compile_count"], stats
