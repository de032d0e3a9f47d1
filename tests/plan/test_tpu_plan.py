"""`jaxeval plan --topology`: the executables of a run compiled for TPU slices on this CPU host.

libtpu is a test dependency (`jaxeval[tpu]` in the test extra): the TPU compiler runs here, nothing
runs on a TPU. Shapes are the real models' (SmolLM2-135M, Llama-3-8B) in bf16, at short rows and a
small cache so that the whole file compiles in a few minutes on two cores.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
import types

import pytest

from jaxeval.errors import JaxevalError
from jaxeval.models.families import spec_from_config
from jaxeval.plan.compiled import plan_topology
from jaxeval.plan.costs import (
    Compiled,
    estimated_cycles,
    first_layers,
    hlo_facts,
    kernel_costs,
    layer_period,
)
from jaxeval.plan.jobs import attention_flops
from jaxeval.plan.memory import read_config
from jaxeval.plan.report import TopologyPlan, fix_for
from jaxeval.plan.topology import GIB, TOPOLOGIES, get_topology, topology_devices

REPO = pathlib.Path(__file__).resolve().parents[2]
LLAMA_8B = REPO / "configs" / "models" / "llama-3-8b"

SMOLLM2 = REPO / "configs" / "models" / "smollm2-135m"  # its public config.json


@pytest.fixture(scope="module")
def smollm2() -> pathlib.Path:
    return SMOLLM2


def _check(plan, n_executables: int) -> None:
    """Every executable compiled, fits its chip, runs our Pallas kernels and nothing of the CPU's
    or the host's; one compile per planned executable."""
    chip = plan.topology.chip
    assert len(plan.executables) == n_executables
    for e in plan.executables:
        assert e.error is None, (e.name, e.error)
        assert 0 < e.hbm_bytes <= chip.allowed_hbm_bytes, (e.name, e.hbm_bytes)
        summary = e.summary(plan.topology)
        assert summary["estimate_s"] > 0 and 0 < summary["mfu_estimate"] < 1, e.name
        assert e.flops > 0 and e.bytes_accessed > 0, e.name
        assert e.cpu_custom_calls == 0 and e.host_transfers == 0, e.name
        assert e.pallas_kernels > 0, (e.name, "no Pallas TPU kernel in the HLO")
    assert plan.ok and plan.attention == "tpu"


def _most_points_and_decode(job) -> bool:
    """On the slices after the v5e-8 (to keep the file's compiles within minutes): the scoring
    bucket of the most points (the larger head, so the larger HBM) and the decode step."""
    return job.kind == "decode" or re.fullmatch(r"score T=(\d+) K=\1 B=\d+", job.name) is not None


def _decode(job) -> bool:
    return job.kind == "decode"


@pytest.mark.parametrize("topology", ["v5e-8", "v4-8", "v5e-16"])
def test_smollm2_compiles_for_tpu_slices(smollm2, topology):
    """Its 3 kv heads and width 576 divide no slice's chips: the kernels and the rule table's
    replicated fallbacks compile and fit (every kind of executable: the 8B test)."""
    first = topology == "v5e-8"
    plan = plan_topology(
        read_config(str(smollm2)),
        topology,
        lengths=[512],
        gen_rows=64,
        gen_slots=1024,
        gen_new=128,
        count_layers=False,
        keep=_most_points_and_decode if first else _decode,
    )
    _check(plan, 2 if first else 1)
    assert plan.mesh["fsdp"] == len(topology_devices(topology))  # one device per chip
    assert "decode step 64 rows" in plan.table()
    assert ("| score T=512 K=512" in plan.table()) == first


@pytest.mark.slow
@pytest.mark.parametrize("topology", ["v5e-8", "v4-8", "v5e-16"])
def test_llama_3_8b_fits_with_pallas_kernels(topology):
    """The target shape: bf16 Llama-3-8B scoring rows of 2,048 tokens and a decode step of
    64 rows x 4,096 slots compile for a v5e-8, a v4-8 (4 chips of 32 GiB) and a v5e-16
    (4 hosts) and fit their chips; on the v5e-8, the prefill of a prompt of 3,840 tokens too."""
    everything = topology == "v5e-8"
    plan = plan_topology(
        read_config(str(LLAMA_8B)),
        topology,
        lengths=[2048],
        gen_slots=4096,
        count_layers=False,
        keep=None if everything else _most_points_and_decode,
    )
    _check(plan, 4 if everything else 2)
    decode = plan.executables[-1]
    assert decode.kind == "decode" and decode.alias_bytes > 0  # the engine state is donated
    if everything:
        prefill = plan.executables[-2]
        assert prefill.kind == "prefill" and prefill.tokens == 4096  # one prompt: the engine's rule


def test_layer_costs_extrapolate_exactly_on_a_small_model(tmp_path):
    """The cost of L layers from compiles of 2 and 3 unrolled layers equals the cost of all L
    unrolled (4 layers here), for a scoring bucket on one TPU chip."""
    config = json.loads((SMOLLM2 / "config.json").read_text())
    config.update(num_hidden_layers=4, vocab_size=512, hidden_size=128)
    config.update(num_attention_heads=2, num_key_value_heads=1, intermediate_size=256)
    (tmp_path / "config.json").write_text(json.dumps(config))
    from jaxeval.lm.score.buckets import fitted_buckets
    from jaxeval.models.runtime import make_runtime
    from jaxeval.plan.costs import counted_cost, counting, layer_costs, sharded_abstract_params
    from jaxeval.plan.jobs import score_buckets, scoring_jobs, topology_mesh

    topo = get_topology("v5e-8")
    mesh = topology_mesh(topo, "single")
    config = read_config(str(tmp_path))
    spec = spec_from_config(config, compute_dtype="bfloat16")
    runtime = make_runtime(mesh, "xla")
    grid = fitted_buckets(max_length=256, token_budget=1024)
    (job,) = scoring_jobs(spec, mesh, grid, score_buckets(grid, [64])[:1])
    flops, nbytes = layer_costs(job.build, spec, runtime, mesh, "bfloat16")
    full = first_layers(spec, 4)
    params = sharded_abstract_params(full, mesh, "bfloat16")
    exact = counted_cost(job.build(full, counting(runtime), params))
    assert flops == pytest.approx(exact[0], rel=1e-3)
    assert nbytes == pytest.approx(exact[1], rel=0.05)


def test_useful_flops_rules():
    spec = spec_from_config(read_config(str(LLAMA_8B)))
    assert layer_period(spec) == 1
    # one query after 9 keys: 10 keys seen, per layer 4 H E per key
    per_key = 4 * spec.num_heads * spec.head_dim
    assert attention_flops(spec, 1, 9) == spec.num_layers * per_key * 10
    # 4 queries from the start: 1 + 2 + 3 + 4 keys
    assert attention_flops(spec, 4, 0) == spec.num_layers * per_key * 10


def test_hlo_facts_counts_collectives_kernels_and_host_transfers():
    text = "\n".join(
        [
            "%ag = bf16[8,4] all-gather-start(bf16[1,4] %p), dimensions={0}",
            "%ag.done = bf16[8,4] all-gather-done(%ag)",
            "%ar = f32[] all-reduce(f32[] %x), to_apply=%add",
            '%k = bf16[2] custom-call(%a), custom_call_target="tpu_custom_call"',
            '%c = f32[2] custom-call(%a), custom_call_target="jaxeval_packed_attention"',
            "%s = (f32[2], u32[]) send(%a, %t), is_host_transfer=true",
        ]
    )
    facts = hlo_facts(text)
    assert facts["collectives"] == {"all-gather": 1, "all-reduce": 1}
    assert facts["pallas_kernels"] == 1 and facts["cpu_custom_calls"] == 1
    assert facts["host_transfers"] == 1


def test_topologies_and_errors():
    assert {"v5e-8", "v4-8", "v5p-8", "v6e-8", "v5e-16", "v5e-32"} <= set(TOPOLOGIES)
    assert get_topology("v4-8").chips == 4 and get_topology("v5e-16").hosts == 4
    assert get_topology("v5e-8").hosts == 1
    with pytest.raises(JaxevalError, match="did you mean v5e-8"):
        get_topology("v5e8")


def test_cli_stops_when_the_parameters_alone_do_not_fit(capsys):
    """Llama-3-8B in float32 on one v5e chip (--mesh single): 29.9 GiB of parameters for 16 GiB;
    exit 1 at once, nothing compiled, with the fix."""
    from jaxeval.cli import main

    code = main(
        ["plan", "--topology", "v5e-8", "--mesh", "single", "--model_args",
         f"pretrained={LLAMA_8B},dtype=float32"]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 1
    assert "29.92 GiB per chip (**over**: nothing compiled)" in out
    assert "the parameters alone take 29.92 GiB per chip, the compiler allows 15.75 GiB" in err
    assert "fix: more chips" in err and "compiling" not in err


def test_cli_reports_executables_that_do_not_fit(smollm2, capsys):
    """SmolLM2 with 1,024 rows x 8,192 slots of cache on a v5e-4 (45 GiB of cache per chip): the
    scoring executables compile and fit; the engine is refused before compiling by the run's rule
    (`lm.generate.sizing`), with what it needs; exit 1 with the fix. Without layer costs the rates
    are not printed (a scanned layer counted once)."""
    from jaxeval.cli import main

    code = main(
        ["plan", "--topology", "v5e-4", "--model_args", f"pretrained={smollm2},max_length=8192",
         "--lengths", "128", "--token_budget", "4096", "--no_layer_costs",
         "--gen_batch_size", "1024", "--gen_slots", "8192"]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 1
    rows = [line for line in out.splitlines() if line.startswith("| score T=128")]
    assert len(rows) == 2 and all("(one layer) | - | - | - | - |" in r for r in rows)
    assert "| generation engine of 8,192 slots | **does not compile**: RESOURCE_EXHAUSTED" in out
    decode = next(line for line in err.splitlines() if line.startswith("generation engine"))
    assert "out of HBM: RESOURCE_EXHAUSTED" in decode and "gen_batch_size=1024 needs" in decode
    assert "fix: fewer generation rows (--gen_batch_size)" in decode


def test_without_libtpu_the_error_says_how_to_get_it(monkeypatch):
    from jaxeval.plan import topology

    monkeypatch.setattr(topology, "libtpu_available", lambda: False)
    with pytest.raises(JaxevalError, match="compiling for v5e-8 needs libtpu") as raised:
        topology.topology_devices("v5e-8")
    assert "jaxeval[tpu]" in str(raised.value.hint)


def test_a_decode_step_reads_its_weight_shard_and_cache_once(tmp_path):
    """On an fsdp slice a decode step leaves each layer's weights on their shards
    (`decoder.weights_stay`): its bytes per step (`step_costs`, one step apart from what the chunk
    moves once per call) are within 2x of the chip's weight shard plus its cache rows (1.59x),
    where gathering every layer's weights took 7.0x (SmolLM2's shapes cut to 8 layers, whose
    head and sampling weigh more than at 30 layers, where the step is 1.21x: docs/tpu.md)."""
    from jaxeval.models.runtime import make_runtime
    from jaxeval.plan.costs import sharded_abstract_params, step_costs
    from jaxeval.plan.jobs import generation_jobs, param_bytes_per_chip, topology_mesh

    config = json.loads((SMOLLM2 / "config.json").read_text())
    config.update(num_hidden_layers=8)
    (tmp_path / "config.json").write_text(json.dumps(config))
    mesh = topology_mesh(get_topology("v5e-8"), "fsdp")
    spec = spec_from_config(read_config(str(tmp_path)), compute_dtype="bfloat16")
    runtime = make_runtime(mesh, None)
    rows, slots = 64, 4096
    (_, decode) = generation_jobs(spec, mesh, rows=rows, slots=slots, n_new=128, prompt=3968)
    flops, step, once = step_costs(decode.steps, spec, runtime, mesh, "bfloat16")
    weights = param_bytes_per_chip(sharded_abstract_params(spec, mesh, "bfloat16"))
    cache = rows * slots * spec.num_layers * spec.num_kv_heads * spec.head_dim * 2 * 2 / 8
    assert 0 < step <= 2 * (weights + cache), (step, weights, cache)
    assert flops > 0 and once >= 0


HLO_WITH_A_LOOP = """HloModule m, entry_computation_layout={(f32[])->f32[]}

%fused (p: f32[]) -> f32[] {
  %x = f32[] add(%p, %p), backend_config={"estimated_cycles":"999"}
}

%body (p: (s32[], f32[])) -> (s32[], f32[]) {
  %g = f32[] fusion(%a), calls=%fused, backend_config={"window_config":{"estimated_cycles":"7"}}
}

%cond (p: (s32[], f32[])) -> pred[] {
  %i = s32[]{:T(128)} get-tuple-element(%p), index=0
  %n = s32[]{:T(128)} constant(30)
  ROOT %lt = pred[]{:T(512)} compare(%i, %n), direction=LT
}

%b1 (p: f32[]) -> f32[] {
  %h = f32[] fusion(%a), calls=%fused, backend_config={"estimated_cycles":"5"}
}

%b2 (p: f32[]) -> f32[] {
  %h = f32[] fusion(%a), calls=%fused, backend_config={"estimated_cycles":"9"}
}

ENTRY %main (a: f32[]) -> f32[] {
  %f = f32[] fusion(%a), calls=%fused, backend_config={"estimated_cycles":"100"}
  %w = (s32[], f32[]) while(%t), condition=%cond, body=%body
  %k = (s32[], f32[]) while(%t), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"2"}}
  %c = f32[] conditional(%i, %a, %a), branch_computations={%b1, %b2}
}
"""


def test_estimated_cycles_count_loops_by_their_trip_counts():
    """100 in the entry; a loop of 30 (its condition's bound) and one of 2 (known) over a body of
    7; the dearer branch, 9; a fusion's own computation not again: 100 + 210 + 14 + 9."""
    assert estimated_cycles(HLO_WITH_A_LOOP) == 333
    assert (
        estimated_cycles(HLO_WITH_A_LOOP.replace("direction=LT", "direction=NE"))
        == 100 + 7 + 14 + 9
    )


def test_a_step_never_counts_more_than_the_one_step_call(monkeypatch):
    """One step = the two-step call less the one-step call, bounded by the one-step call: a
    two-step program partitioned another way (every row's cache gathered) does not count."""
    from jaxeval.models.runtime import REFERENCE
    from jaxeval.plan import costs

    figures = {1: (10.0, 3.3e9), 2: (20.0, 4.3e9)}
    monkeypatch.setattr(costs, "counted_cost", lambda job, cache=None: figures[job])
    monkeypatch.setattr(costs, "first_layers", lambda spec, n: spec)
    monkeypatch.setattr(costs, "sharded_abstract_params", lambda spec, mesh, dtype: None)

    def steps(n):
        return lambda cut, runtime, params: n

    spec = types.SimpleNamespace(num_layers=2)
    flops, step, once = costs.step_costs(steps, spec, REFERENCE, None, "bfloat16")
    assert (flops, step, once) == (10.0, pytest.approx(1.0e9), pytest.approx(2.3e9))
    figures[2] = (20.0, 16.7e9)  # Llama-3-8B, 8 rows on a v5e-8: the cache gathered
    assert costs.step_costs(steps, spec, REFERENCE, None, "bfloat16") == (10.0, 3.3e9, 0.0)


KERNEL = (
    '  %r = f32[640,768] custom-call(%a), custom_call_target="tpu_custom_call", '
    'backend_config={"custom_call_config":{"cost_estimate":{"flops":"{F}","transcendentals":"0",'
    '"bytes_accessed":"{B}","remote_bytes_transferred":"0"}}}\n'
)


def test_kernels_count_at_the_roofline_of_what_they_declare():
    """A Pallas / Mosaic custom call has no `estimated_cycles` but declares its FLOPs and bytes:
    summed with loop trip counts like the cycles (30 in the loop, 2 known: 32 x 1e9 FLOPs in the
    body, 1e6 in the entry), and added to the estimate at the chip's roofline."""
    body = KERNEL.replace("{F}", "1000000000").replace("{B}", "4000")
    entry = KERNEL.replace("{F}", "1000000").replace("{B}", "8000000000")
    text = HLO_WITH_A_LOOP.replace(
        "%body (p: (s32[], f32[])) -> (s32[], f32[]) {\n",
        "%body (p: (s32[], f32[])) -> (s32[], f32[]) {\n" + body,
    )
    text = text.replace(
        "ENTRY %main (a: f32[]) -> f32[] {\n", "ENTRY %main (a: f32[]) -> f32[] {\n" + entry
    )
    assert kernel_costs(text) == (32e9 + 1e6, 32 * 4000 + 8e9)
    assert estimated_cycles(text) == 333  # the kernels add no cycles of their own
    assert kernel_costs(HLO_WITH_A_LOOP) == (0.0, 0.0)
    topo = get_topology("v5e-8")
    flops, nbytes = kernel_costs(text)
    c = Compiled(name="s", kind="score", tokens=1, useful_flops=1.0, cycles=333.0,
                 kernel_flops=flops, kernel_bytes=nbytes)  # fmt: skip
    kernels = max(flops / topo.chip.peak_flops, nbytes / topo.chip.hbm_bandwidth)
    assert c.estimate_s(topo) == pytest.approx(333 / topo.chip.clock_hz + kernels)
    assert kernels == nbytes / topo.chip.hbm_bandwidth  # 8 GB: the bytes bind here


def _plan_of(*executables: Compiled, topology: str = "v5e-8", param_bytes: int = GIB):
    return TopologyPlan(
        topology=get_topology(topology), model_type="llama", dtype="bfloat16", attention="tpu",
        mesh={"fsdp": 8}, parameters=1, param_bytes=param_bytes, token_budget=65536,
        executables=executables, compiler="libtpu 0, jax 0",
    )  # fmt: skip


def test_fits_against_the_memory_the_compiler_allows():
    """15.9 GiB on a v5e: under the chip's 16 GiB, over the 15.75 GiB libtpu allows a program."""
    chip = get_topology("v5e-8").chip
    assert chip.allowed_hbm_bytes == int(15.75 * GIB) < chip.hbm_bytes == 16 * GIB
    over = Compiled(
        name="score", kind="score", tokens=1, useful_flops=1.0, temp_bytes=int(15.9 * GIB)
    )
    under = dataclasses.replace(over, temp_bytes=int(15.7 * GIB))
    s = over.summary(get_topology("v5e-8"))
    assert not s["fits"] and s["failure"] == "hbm"
    assert s["allowed_hbm_bytes"] == chip.allowed_hbm_bytes and s["nominal_hbm_bytes"] == 16 * GIB
    assert under.fits(get_topology("v5e-8")) and not _plan_of(over).ok and _plan_of(under).ok
    assert "15.90 **over**" in _plan_of(over).table()


def test_each_failure_gets_its_own_fix():
    """Parameters out of HBM: more chips or a smaller dtype; a scoring bucket: --token_budget; a
    generation executable: --gen_batch_size / --gen_slots; a compiler error: its words and the
    backend settings; a program over the allowed HBM without an error: the same as out of HBM."""
    oom = "RESOURCE_EXHAUSTED: Ran out of memory on HBM ... exceeds available HBM (15.75G)."
    score = Compiled(name="score T=128", kind="score", tokens=1, useful_flops=1.0, error=oom)
    decode = dataclasses.replace(score, name="decode step", kind="decode")
    broken = dataclasses.replace(score, name="prefill", kind="prefill", error="INTERNAL: Mosaic")
    big = Compiled(name="admit", kind="prefill", tokens=1, useful_flops=1.0, temp_bytes=17 * GIB)
    advice = _plan_of(score, decode, broken, big, param_bytes=20 * GIB).advice().splitlines()
    assert advice[0].startswith("the parameters alone take 20.00 GiB per chip")
    assert "fix: more chips" in advice[0] and "dtype=bfloat16" in advice[0]
    assert "out of HBM" in advice[1] and "--token_budget, now 65,536" in advice[1]
    assert "fix: fewer generation rows (--gen_batch_size)" in advice[2]
    assert "does not compile: INTERNAL: Mosaic" in advice[3] and "--attention xla" in advice[3]
    assert "needs 17.00 GiB per chip" in advice[4] and "--gen_slots" in advice[4]
    assert (
        fix_for("hbm", "score", budget=8)
        == "a smaller token budget per scoring batch (--token_budget, now 8)"
    )
    rows = _plan_of(score).to_json()["executables"]
    assert rows[0]["failure"] == "hbm" and "--token_budget" in rows[0]["fix"]


def test_a_scoring_budget_that_cannot_fit_is_out_of_hbm(smollm2):
    """SmolLM2 with 2^25 tokens per scoring batch of rows of 128 on a v5e-8: the compiler runs out
    of HBM; the fix names --token_budget."""
    plan = plan_topology(
        read_config(str(smollm2)),
        "v5e-8",
        lengths=[128],
        token_budget=1 << 25,
        generation=False,
        count_layers=False,
        keep=_most_points_and_decode,
    )
    (e,) = plan.executables
    assert not plan.ok and e.failure(plan.topology) == "hbm", e
    assert "--token_budget, now 33,554,432" in plan.advice()


def test_a_failed_counting_compile_is_shown_with_its_reason(smollm2, monkeypatch):
    """When the layer-counting compiles fail the executable still compiles; the table and the JSON
    say why its FLOPs are the compiler's (a scanned layer once)."""
    from jaxeval.plan import compiled

    def fail(*args, **kwargs):
        raise RuntimeError("INTERNAL: no counting today")

    monkeypatch.setattr(compiled, "layer_costs", fail)
    plan = plan_topology(
        read_config(str(smollm2)),
        "v5e-8",
        lengths=[128],
        token_budget=8192,
        generation=False,
        keep=lambda job: job.name.startswith("score T=128 K=128"),
    )
    (e,) = plan.executables
    assert e.error is None and not e.layers_counted
    assert e.count_error == "RuntimeError: INTERNAL: no counting today"
    assert "(one layer; counting failed: RuntimeError: INTERNAL: no counting today)" in plan.table()
    assert plan.to_json()["executables"][0]["count_error"] == e.count_error
    assert e.cycles > 0  # the estimate needs no counting compiles


def test_a_second_plan_reads_the_compilers_figures_back(smollm2, tmp_path):
    """The plan's cache (`FigureCache`): the same program on the same slice is not compiled again,
    its figures are the first plan's; another slice's devices are another key."""
    from jaxeval.plan.figures import FigureCache

    cache = FigureCache(tmp_path / "plan", "libtpu test")

    def plan(topology: str):
        return plan_topology(
            read_config(str(smollm2)), topology, lengths=[128], token_budget=8192,
            generation=False, count_layers=False, cache=cache,
            keep=lambda job: job.name.startswith("score T=128 K=128"),
        )  # fmt: skip

    (first,), (again,) = plan("v5e-8").executables, plan("v5e-8").executables
    assert not first.cached and again.cached and len(list(cache.path.glob("*.json"))) == 1
    assert dataclasses.replace(again, cached=False) == first
    (other,) = plan("v6e-8").executables
    assert not other.cached and len(list(cache.path.glob("*.json"))) == 2
