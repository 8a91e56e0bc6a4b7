#!/usr/bin/env bash
# Run gymnasium's own tests/vector with gymvec's drop-ins swapped in for its classes.
#   .ci/gymnasium_vector_suite.sh PATH_TO_GYMNASIUM_SOURCE [pytest args...]
# The source must be the installed gymnasium's version (its tests are not in the PyPI
# package): e.g. `git clone --depth 1 --branch v1.4.0 https://github.com/Farama-Foundation/Gymnasium`.
# Needs pygame for the render tests. Not part of `.ci/run`: CI has no gymnasium checkout.
set -euo pipefail
src=$(cd "$1" && pwd)
shift
here=$(cd "$(dirname "$0")" && pwd)
cd "$src"
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" exec python -m pytest -p swap_gymvec tests/vector \
  -q -p no:cacheprovider -W ignore "$@"
