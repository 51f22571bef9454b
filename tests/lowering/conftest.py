import sys
from pathlib import Path

# benchmarks/op_streams.py builds the synthetic op streams the tests share with the benchmarks
ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
