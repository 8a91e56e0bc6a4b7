#!/usr/bin/env bash
# Run Stable-Baselines3's own vec-env tests with gymvec's SB3VecEnv swapped in for
# DummyVecEnv and SubprocVecEnv.
#   .ci/sb3_vec_env_suite.sh PATH_TO_SB3_SOURCE [pytest args...]
# The source's tests/ must suit the installed stable-baselines3 (they are not in the PyPI
# package): e.g. a clone of https://github.com/DLR-RM/stable-baselines3 at that version.
# Not part of `.ci/run`: CI has no SB3 checkout.
set -euo pipefail
src=$(cd "$1" && pwd)
shift
here=$(cd "$(dirname "$0")" && pwd)
cd "$src"
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" exec python -m pytest -p swap_gymvec_sb3 \
  tests/test_vec_envs.py tests/test_vec_normalize.py tests/test_vec_stacked_obs.py \
  tests/test_vec_check_nan.py tests/test_vec_extract_dict_obs.py -q -p no:cacheprovider -W ignore "$@"
