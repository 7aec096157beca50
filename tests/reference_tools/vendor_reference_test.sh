#!/usr/bin/env bash
# tests/reference_tools/vendor_reference_test.py under a Python with torch and safetensors (the
# reference venv: DAY0_REF_PYTHON, else /opt/ref525/bin/python, else /opt/refvenv/bin/python).
# Exit 77 (CTest: skipped) with a visible message where there is none: a fresh CI machine has only what
# our own files install, and the C++ side never needs torch.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python=""
for candidate in "${DAY0_REF_PYTHON:-}" /opt/ref525/bin/python /opt/refvenv/bin/python; do
  if [[ -n "$candidate" && -x "$candidate" ]] && "$candidate" -c "import torch, safetensors" 2>/dev/null; then
    python="$candidate"
    break
  fi
done
if [[ -z "$python" ]]; then
  echo "SKIPPED: no Python with torch and safetensors (set DAY0_REF_PYTHON; tools/reference/README.md sets one up)"
  exit 77
fi
echo "python: $python"
DAY0_REF_THREADS=1 exec "$python" "$here/vendor_reference_test.py" 2>&1
