"""scripts/valgrind-verdict.py fails on errors in zerohop's frames and on serious errors
anywhere, and lets the runtimes' known noise through."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "valgrind-verdict.py"

NOISE = """==12== Conditional jump or move depends on uninitialised value(s)
==12==    at 0x4841: PyObject_Free (obmalloc.c:1)
==12==    by 0x4842: _PyEval_EvalFrameDefault (ceval.c:2)
==12==
"""
OURS = """==12== Invalid read of size 8
==12==    at 0x5001: zh_table_new (table.rs:53)
==12==    by 0x5002: main (soa_inference.cpp:83)
==12==
"""
SERIOUS = """==12== Invalid free() / delete / delete[] / realloc()
==12==    at 0x6001: free (vg_replace_malloc.c:1)
==12==    by 0x6002: c10::deleter (libc10.so)
==12==
"""


def verdict(tmp_path, text):
    log = tmp_path / "memcheck.log"
    log.write_text(text)
    return subprocess.run([sys.executable, str(SCRIPT), str(log), "test"],
                          capture_output=True, text=True, timeout=120)


def test_runtime_noise_passes(tmp_path):
    out = verdict(tmp_path, NOISE)
    assert out.returncode == 0 and "1 error records, 0 in zerohop or serious" in out.stdout


def test_an_error_in_zerohop_frames_fails(tmp_path):
    out = verdict(tmp_path, NOISE + OURS)
    assert out.returncode == 1 and "zh_table_new" in out.stdout


def test_an_invalid_free_anywhere_fails(tmp_path):
    out = verdict(tmp_path, NOISE + SERIOUS)
    assert out.returncode == 1 and "Invalid free" in out.stdout
