"""The fused CPU prefill/scoring attention kernel alone, on one core and on two, in C++.

    python bench/bench_packed_kernel.py [--lengths 512,1280,8192] [--against OLD.cc] [--pairs 2]

One layer of `blocked_attend`'s packed kernel (`cpu_attention.cc`, `PackedOne`) at SmolLM2-135M
shapes: one causal row of T tokens, 3 KV heads x 3 query heads, head dim 64, random float32 inputs,
"nothing seen" init state. A small C++ driver includes the kernel's source and calls its tasks
directly (no JAX, no XLA thread pool), on one thread and on two, and prints the best of 7 in ms per
layer with the causal attention FLOPs per second (4 * H * E * T(T+1)/2). `--against` builds the
same driver on another version of the source (e.g. `git show HEAD~1:jaxeval/ops/attention/cpu_attention.cc
> old.cc`) and alternates the two `--pairs` times, printing whether their outputs are bit-identical:
the machine's timings drift between runs, so an A/B is a series of alternated pairs.
"""

from __future__ import annotations

import argparse
import filecmp
import pathlib
import subprocess
import tempfile

import jax

from jaxeval.ops.attention import cpu as cpu_attention

DRIVER = r"""
#include SOURCE
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>

int main(int argc, char** argv) {
  const int64_t T = std::atoll(argv[1]), threads = std::atoll(argv[2]);
  const int64_t B = 1, G = 3, X = 3, E = 64, H = G * X;
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  std::vector<float> q(B * T * H * E), kt(B * G * E * T), v(B * G * T * E);
  for (auto* a : {&q, &kt, &v}) for (auto& x : *a) x = normal(rng);
  std::vector<float> m0(B * G * X * T, kMasked), total0(B * G * X * T, 0.0f);
  std::vector<float> acc0(B * G * X * T * E, 0.0f), out(B * T * H * E);
  std::vector<int32_t> seg(B * T, 1), par(B * T, 0), pos(B * T);
  for (int64_t i = 0; i < T; ++i) pos[i] = static_cast<int32_t>(i);
  const Packed p{q.data(), kt.data(), v.data(), seg.data(), par.data(), pos.data(), m0.data(),
                 total0.data(), acc0.data(), T, G, X, E, 0.125f, 0.0f, 0, false, out.data()};
  const int64_t tasks = B * G * ((T + kQueries - 1) / kQueries);
  double best = 1e30;
  for (int rep = 0; rep < 7; ++rep) {
    std::atomic<int64_t> next{0};
    auto work = [&] {
      std::vector<float> scratch;
      for (int64_t t; (t = next.fetch_add(1)) < tasks;) PackedOne(p, t, scratch);
    };
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> helpers;
    for (int64_t i = 1; i < threads; ++i) helpers.emplace_back(work);
    work();
    for (auto& h : helpers) h.join();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    best = std::min(best, took.count());
  }
  std::printf("%.3f\n", best * 1e3);
  std::FILE* f = std::fopen(argv[3], "wb");
  std::fwrite(out.data(), sizeof(float), out.size(), f);
  std::fclose(f);
  return 0;
}
"""


def build(source: pathlib.Path, work: pathlib.Path, name: str) -> pathlib.Path:
    compiler = cpu_attention.compiler()
    if compiler is None:
        raise SystemExit("no C++ compiler found (tried $CXX, c++, g++, clang++)")
    driver = work / f"{name}.cc"
    driver.write_text(DRIVER.replace("SOURCE", f'"{source.resolve()}"'))
    exe = work / name
    flags = [f for f in cpu_attention._FLAGS if f not in ("-shared", "-fPIC")]
    cmd = [compiler, *flags, f"-I{jax.ffi.include_dir()}", str(driver), "-o", str(exe), "-pthread"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return exe


def run(exe: pathlib.Path, length: int, threads: int, out: pathlib.Path) -> float:
    done = subprocess.run([str(exe), str(length), str(threads), str(out)], check=True,
                          capture_output=True, text=True)  # fmt: skip
    return float(done.stdout.strip())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", default="512,1280,8192")
    p.add_argument("--against", default=None, help="another version of cpu_attention.cc")
    p.add_argument("--pairs", type=int, default=2)
    args = p.parse_args(argv)
    work = pathlib.Path(tempfile.mkdtemp(prefix="jaxeval-packed-"))
    versions = {"this": build(cpu_attention.SOURCE, work, "this")}
    if args.against:
        versions["against"] = build(pathlib.Path(args.against), work, "against")
    heads, head_dim = 9, 64
    print("| T | threads | version | ms per layer (each run) | GFLOP/s (best) | output |")
    print("|---|---|---|---|---|---|")
    for length in (int(x) for x in args.lengths.split(",")):
        flops = 4 * heads * head_dim * length * (length + 1) / 2
        for threads in (1, 2):
            times: dict[str, list[float]] = {name: [] for name in versions}
            for _ in range(args.pairs if args.against else 1):
                for name, exe in versions.items():
                    times[name].append(run(exe, length, threads, work / f"{name}.bin"))
            same = ""
            if args.against:
                equal = filecmp.cmp(work / "this.bin", work / "against.bin", shallow=False)
                same = "bit-identical" if equal else "differs"
            for name, ts in times.items():
                runs = ", ".join(f"{t:.2f}" for t in ts)
                rate = flops / (min(ts) / 1e3) / 1e9
                print(f"| {length} | {threads} | {name} | {runs} | {rate:.1f} | {same} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
