"""The constants of ``docs/scaling.md``'s throughput model, measured on the Ray at hand.

``python -m gymvec.bench.ray_costs`` (add ``--address auto`` on a cluster) prints:

* the round trip of one actor call with the bytes one ``RayEnv`` command carries (no env
  work), for one actor;
* the driver's fan-out: the wall time of one such call to each of ``n`` actors at once, for
  growing ``n``, and its slope per added actor;
* the bytes one command carries per sub-env in and out, for a CartPole and an Atari-sized
  observation (from the same ``ShareLayout`` that ``RayEnv`` uses).

Without ``--address``, a local Ray on 127.0.0.1 only is started (see ``ray_runners``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence

import numpy as np

from gymvec.bench.ray_runners import ensure_ray


class Echo:
    """An actor that answers with as many bytes as it is asked for (a command's answer)."""

    def run(self, packed: bytes, answer_nbytes: int) -> bytes:
        return bytes(answer_nbytes)

    def ready(self) -> bool:
        return True


def bytes_per_env(obs_shape: tuple[int, ...], obs_dtype: str) -> tuple[int, int]:
    """(bytes in, bytes out) of one sub-env's step with "next" shipped back, from RayEnv's own
    layout of a share (flags and alignment included; one sub-env per share gives the upper
    bound, larger shares amortise the alignment)."""
    from gymvec.backends.ray.worker import ShareLayout
    from gymvec.common.structure import LeafSpec
    from gymvec.wire.buffers import BufferLayout
    from gymvec.wire.commands import Control

    num_envs = 16
    leaves: list[LeafSpec] = [((), obs_shape, np.dtype(obs_dtype))]
    layout = BufferLayout(num_envs, leaves, [(("action",), (), np.dtype(np.int64))], {})
    share = ShareLayout(layout, num_envs)
    sent = Control.nbytes(num_envs) + share.action.stop - share.action.start
    answer = 1 + share.next.stop - share.next.start
    return sent // num_envs, answer // num_envs


def time_calls(ray, actors: list, packed: bytes, answer_nbytes: int, rounds: int) -> float:
    """Median seconds of one call to each of ``actors`` at once, until every answer is in."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        ray.get([actor.run.remote(packed, answer_nbytes) for actor in actors])
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gymvec.bench.ray_costs")
    parser.add_argument("--address", help="a running cluster (default: a local Ray)")
    parser.add_argument("--max-actors", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args(argv)
    if args.address:
        from gymvec.backends.ray.executor import connect

        ray = connect(args.address)
    else:
        ray = ensure_ray()
    sent, answer = bytes_per_env((4,), "float32")
    atari_sent, atari_answer = bytes_per_env((4, 84, 84), "uint8")
    print(f"bytes per sub-env and step: CartPole {sent} in, {answer} out;")
    print(f"  4x84x84 uint8 frames {atari_sent} in, {atari_answer} out")
    actor_class = ray.remote(num_cpus=0)(Echo)
    actors = [actor_class.remote() for _ in range(args.max_actors)]
    ray.get([actor.ready.remote() for actor in actors])
    packed, answer_nbytes = bytes(16 * sent), 16 * answer  # 16 CartPoles per actor
    for actor in actors:  # warm up every actor's connection
        ray.get(actor.run.remote(packed, answer_nbytes))
    counts = sorted({1, 2, 4, args.max_actors} & set(range(1, args.max_actors + 1)))
    walls = {}
    for n in counts:
        walls[n] = time_calls(ray, actors[:n], packed, answer_nbytes, args.rounds)
        print(f"{n} actor(s), one call each: {walls[n] * 1e3:.3f} ms")
    if len(counts) > 1:
        slope = np.polyfit(counts, [walls[n] for n in counts], 1)[0]
        print(f"fan-out: {slope * 1e3:.3f} ms per added actor; round trip {walls[1] * 1e3:.3f} ms")
    for actor in actors:
        ray.kill(actor)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
