"""The phase clock behind every results file's `timing` block (jaxeval.platform.phases)."""

from __future__ import annotations

import threading
import time

import pytest

from jaxeval.platform import phases


@pytest.fixture
def clock():
    clock = phases.begin_run()
    yield clock
    phases.end_run()


def test_phases_are_exclusive_and_add_up_to_the_wall(clock):
    with phases.phase("tokenize"):
        time.sleep(0.1)
        with phases.phase("device"):  # "tokenize" pauses meanwhile
            time.sleep(0.1)
        time.sleep(0.1)
    time.sleep(0.05)  # in no phase
    block = clock.block()
    seconds = block["phases_s"]
    assert seconds["tokenize"] == pytest.approx(0.2, abs=0.04)
    assert seconds["device"] == pytest.approx(0.1, abs=0.04)
    assert block["unaccounted_s"] == pytest.approx(0.05, abs=0.04)
    assert sum(seconds.values()) + block["unaccounted_s"] == pytest.approx(
        block["wall_s"], abs=0.01
    )
    # host (tokenize, 0.2 s) outweighs device (0.1 s) by a margin no scheduler jitter closes
    assert block["device_s"] == seconds["device"] and block["bound"] == "host"


def test_a_block_made_inside_a_phase_counts_it_so_far(clock):
    with phases.phase("write"):
        time.sleep(0.1)
        block = clock.block()
    assert block["phases_s"]["write"] >= 0.09
    assert block["unaccounted_s"] < 0.05


def test_other_threads_and_counts(clock):
    def worker():
        with phases.phase("device"):  # not the main thread: no phase time
            time.sleep(0.05)
        phases.count("scored_tokens", 7)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    phases.count("scored_tokens", 3)
    block = clock.block()
    assert block["phases_s"]["device"] == 0 and block["scored_tokens"] == 10


def test_outside_a_run_nothing_is_counted_and_unknown_phases_are_refused(clock):
    with pytest.raises(ValueError, match="unknown phase"):
        with phases.phase("lunch"):
            pass
    phases.end_run()
    with phases.phase("device"):
        phases.count("scored_tokens")
    assert phases.current() is None


def test_a_run_in_a_longer_lived_process_starts_its_clock_at_the_run():
    before = time.time()
    assert before - 0.01 <= phases.run_start() <= time.time()  # not the test process's start
    assert phases.process_start() <= before


def test_the_process_start_is_read_to_a_few_hundredths_of_a_second():
    import subprocess
    import sys

    before = time.time()
    probe = "from jaxeval.platform.phases import process_start; print(process_start())"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    started = float(out.stdout)
    assert before - 0.03 <= started <= time.time()
