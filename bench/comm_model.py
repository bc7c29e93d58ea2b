#!/usr/bin/env python3
"""The communication model of issue 26 for data-parallel training: step time from compute time,
gradient bytes and the per-host link rate. A MODEL, not a measurement.

    step = compute + max(0, wire + latency - overlappable)

wire: the bytes the busiest host link carries in one direction per step, over the link's payload
rate. A ring allreduce over P participants sends every byte 2(P-1)/P times along each ring edge
(reduce-scatter, then allgather; each of the 2(P-1) ring steps moves a B/P chunk over every
edge at once, so the slowest edge sets the pace). What crosses a host link depends on which
edges cross it:

  * ring over all P = H x R ranks, ranks of a host consecutive (OpenMPI's --map-by slot or
    ppr:R:node, what netns_mpiexec.sh and a hostfile give): inside a host the edges r -> r+1 go
    over shared memory; of the P edges exactly H cross hosts, one leaving and one entering each
    host. Each host link carries one edge: 2(P-1)/P x B each way. The 2(P-1) steps all wait for
    the cross-host edge, so time = 2(P-1) x (B/P) / bw = 2(P-1)/P x B / bw, with P = H x R.
  * the same ring with ranks dealt round robin over hosts (--map-by node): every edge crosses,
    each host link carries R edges: R x 2(P-1)/P x B (--mapping cyclic).
  * hierarchical (reduce inside a node over shared memory, ring among the H node leaders,
    broadcast inside the node): 2(H-1)/H x B per host link. Intra-node steps are taken as free
    next to the link (they are memory copies), which is optimistic for slow shared memory.

With R ranks per host the flat ring thus costs 2(HR-1)/(HR) vs 2(H-1)/H: within a factor
(at most 2, at H = 2, R large) of the hierarchical one in bandwidth; the larger gap is latency.

latency: alpha x (ring steps) per allreduce: 2(P-1) for a flat ring, 2(H-1) for hierarchical,
times the allreduces per step (gradient buckets plus the small per-step control allreduce).
alpha is per message: ~25-50 us over TCP/Ethernet, ~1-2 us over InfiniBand verbs; 0 for the
namespace links of bench/network_scaling.sh (no netem delay, veth round trips of a few us).

overlappable: the part of backward that runs after the first gradient bucket is ready, i.e.
backward x (n-1)/n for n equal buckets (n = ceil(fp32 gradient bytes / bucket size)), with
backward = 2/3 of compute unless --overlap-ms gives the measured figure. With one bucket
(resnet20's 1.09 MB < 25 MiB, ./train's default before issue 26) nothing can be hidden:
overlappable = 0. ./train's default now is an eighth of the gradient (64 KiB..25 MiB): n = 8.

compute: the step time of the same job with no link limit (bench/network_scaling.sh measures it
in the same run as its "no limit" row).
"""
import argparse
import math
import re
import sys

# Link payload efficiency: the share of the line rate that is gradient bytes. TCP over Ethernet
# with a 1500-byte MTU: 1448 payload bytes per 1514 counted by a Linux qdisc (the tbf/netem of
# the namespace links) = 0.956; on a real wire also preamble and inter-frame gap: 1448/1538 =
# 0.94. InfiniBand with a 4 KiB MTU: ~0.97 of the data rate.
TCP_QDISC_EFF = 1448 / 1514
TCP_WIRE_EFF = 1448 / 1538
IB_EFF = 0.97

# `project`: the fabrics (line rate in bit/s, payload efficiency, alpha in us) - typical figures,
# not measurements.
FABRICS = [
    ("10 GbE (TCP)", 10e9, TCP_WIRE_EFF, 30.0),
    ("25 GbE (TCP)", 25e9, TCP_WIRE_EFF, 30.0),
    ("100 GbE (TCP)", 100e9, TCP_WIRE_EFF, 30.0),
    ("IB HDR 200 Gb/s", 200e9, IB_EFF, 1.5),
]
# `project`: the models (name, parameters, bytes per gradient element, assumed compute ms per
# step of one node). Assumption: a node computes one step of resnet50 in 200 ms (e.g. 8 GPUs at
# batch 64 each, ~2,500 images/s per GPU with mixed precision; the same per step for any node
# count: weak scaling); resnet18 has 1.8 vs 4.1 GFLOPs per image: 90 ms.
MODELS = [
    ("resnet50, fp32 gradients", 25.6e6, 4, 200.0),
    ("resnet50, fp16 gradients", 25.6e6, 2, 200.0),
    ("resnet18, fp32 gradients", 11.7e6, 4, 90.0),
]
NODES = [16, 64, 256]


def rate_bits(text):
    """bit/s of a tc-style rate (10mbit, 1gbit, 100mbit, 2500kbit, 1000bit) or inf for none."""
    t = text.strip().lower()
    if t in ("none", "inf", "unlimited"):
        return math.inf
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)\s*(bit|kbit|mbit|gbit|tbit)?", t)
    if not m:
        raise ValueError(f"--rate: cannot read '{text}' (use e.g. 10mbit, 1gbit, none)")
    scale = {"bit": 1, None: 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}[m.group(2)]
    return float(m.group(1)) * scale


def link_bytes(nbytes, hosts, ranks_per_host, algo, mapping="block"):
    """Bytes one host link carries each way per allreduce of nbytes, and the ring steps."""
    if algo == "hierarchical":
        p = hosts
        return (2 * (p - 1) / p * nbytes if p > 1 else 0.0), 2 * (p - 1)
    p = hosts * ranks_per_host
    if hosts == 1 or p == 1:
        return 0.0, 2 * (p - 1)
    edges = ranks_per_host if mapping == "cyclic" else 1
    return edges * 2 * (p - 1) / p * nbytes, 2 * (p - 1)


def auto_bucket_mb(fp32_bytes):
    """./train's default bucket (dist::auto_bucket_bytes): an eighth of the gradient, 64 KiB..25 MiB."""
    return min(max(fp32_bytes / 8, 64 * 1024), 25 * 1024 * 1024) / (1024 * 1024)


def overlappable_ms(compute_ms, fp32_bytes, bucket_mb, backward_share=2 / 3, buckets=None):
    """Backward after the first of n equal buckets is ready: backward x (n-1)/n."""
    if bucket_mb is None:
        bucket_mb = auto_bucket_mb(fp32_bytes)
    n = buckets or max(1, math.ceil(fp32_bytes / (bucket_mb * 1024 * 1024)))
    return backward_share * compute_ms * (n - 1) / n, n


def predict(compute_ms, nbytes, bits, hosts, ranks_per_host, algo="ring", overlap_ms=None,
            bucket_mb=None, fp32_bytes=None, alpha_us=0.0, efficiency=TCP_QDISC_EFF,
            control_allreduces=1, mapping="block", buckets=None):
    """A dict with the step time and its terms, all in ms."""
    per_link, steps = link_bytes(nbytes, hosts, ranks_per_host, algo, mapping)
    wire = 0.0 if math.isinf(bits) else per_link * 8 / (bits * efficiency) * 1000
    over, buckets = overlappable_ms(compute_ms, fp32_bytes or nbytes, bucket_mb, buckets=buckets)
    if overlap_ms is not None:
        over = overlap_ms
    latency = alpha_us / 1000 * steps * (buckets + control_allreduces)
    step = compute_ms + max(0.0, wire + latency - over)
    return {"step_ms": step, "compute_ms": compute_ms, "wire_ms": wire, "latency_ms": latency,
            "overlappable_ms": over, "link_bytes": per_link, "buckets": buckets,
            "ring_steps": steps}


def cmd_predict(a):
    try:
        bits = rate_bits(a.rate)
    except ValueError as e:
        sys.exit(f"comm_model: {e}")
    for name in ("compute_ms", "bytes", "hosts", "ranks_per_host", "efficiency"):
        if not getattr(a, name) > 0:
            sys.exit(f"comm_model: --{name.replace('_', '-')} must be > 0")
    r = predict(a.compute_ms, a.bytes, bits, a.hosts, a.ranks_per_host, a.algo, a.overlap_ms,
                a.bucket_mb, a.fp32_bytes, a.alpha_us, a.efficiency, a.control_allreduces,
                a.mapping, a.buckets)
    if a.quiet:
        print(f"{r['step_ms']:.1f}")
        return
    print(f"model step {r['step_ms']:.1f} ms = compute {r['compute_ms']:.1f} + max(0, wire "
          f"{r['wire_ms']:.1f} + latency {r['latency_ms']:.2f} - overlappable "
          f"{r['overlappable_ms']:.1f}); {r['link_bytes'] / 1e6:.3f} MB per host link each way, "
          f"{r['buckets']} bucket(s), {r['ring_steps']} ring steps per allreduce ({a.algo}, "
          f"{a.hosts} hosts x {a.ranks_per_host} ranks, {a.rate})")


def cmd_project(a):
    print("MODEL, not a measurement: step time (scaling efficiency = compute / step) of weak-"
          "scaled data-parallel training, hierarchical allreduce (one ring among the node "
          "leaders, one NIC per node), ./train's default buckets (an eighth of the gradient, "
          "at most 25 MiB), backward = 2/3 of compute, "
          "overlappable = backward x (buckets-1)/buckets; latency term = alpha x 2(N-1) per "
          "allreduce x (buckets + 1). Cells: step, efficiency (efficiency with no overlap)")
    print()
    print("| model (compute per step, assumed) | fabric (alpha) | "
          + " | ".join(f"{n} nodes" for n in NODES) + " |")
    print("|---|---|" + "---|" * len(NODES))
    for name, params, elem, compute in MODELS:
        compute = a.compute_ms if a.compute_ms else compute
        for fabric, bits, eff, alpha in FABRICS:
            cells = []
            for n in NODES:
                r = predict(compute, params * elem, bits, n, 1, "hierarchical", None,
                            a.bucket_mb, params * 4, alpha, eff)
                r0 = predict(compute, params * elem, bits, n, 1, "hierarchical", 0.0,
                             a.bucket_mb, params * 4, alpha, eff)
                cells.append(f"{r['step_ms']:.0f} ms, {100 * compute / r['step_ms']:.0f}% "
                             f"({100 * compute / r0['step_ms']:.0f}%)")
            print(f"| {name} ({compute:.0f} ms) | {fabric} ({alpha:g} us) | "
                  + " | ".join(cells) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("predict", help="one step time from measured compute and link facts")
    p.add_argument("--compute-ms", type=float, required=True,
                   help="step time of the same job with no link limit")
    p.add_argument("--bytes", type=float, required=True, help="gradient bytes per allreduce")
    p.add_argument("--rate", required=True, help="per-host link rate each way: 100mbit, 1gbit, none")
    p.add_argument("--hosts", type=int, required=True)
    p.add_argument("--ranks-per-host", type=int, default=1)
    p.add_argument("--algo", choices=["ring", "hierarchical"], default="ring")
    p.add_argument("--mapping", choices=["block", "cyclic"], default="block",
                   help="ranks of a host consecutive (block) or dealt round robin (cyclic)")
    p.add_argument("--overlap-ms", type=float, default=None,
                   help="overlappable backward time; default 2/3 compute x (buckets-1)/buckets")
    p.add_argument("--bucket-mb", type=float, default=None,
                   help="bucket size in MiB [./train's default: gradient / 8, 64 KiB..25 MiB]")
    p.add_argument("--buckets", type=int, default=None,
                   help="the run's bucket count (its 'gradient sync:' line), instead of --bucket-mb")
    p.add_argument("--fp32-bytes", type=float, default=None,
                   help="fp32 gradient bytes (bucket count) when --bytes is compressed")
    p.add_argument("--alpha-us", type=float, default=0.0, help="per-message latency [0]")
    p.add_argument("--efficiency", type=float, default=TCP_QDISC_EFF,
                   help="payload share of the rate [0.956: TCP, MTU 1500, as a qdisc counts]")
    p.add_argument("--control-allreduces", type=int, default=1,
                   help="small allreduces per step that pay latency only [1]")
    p.add_argument("--quiet", action="store_true", help="print the step ms only")
    p.set_defaults(func=cmd_predict)
    q = sub.add_parser("project", help="the README table: 16/64/256 nodes on 10-200 Gb/s")
    q.add_argument("--compute-ms", type=float, default=None, help="override every compute time")
    q.add_argument("--bucket-mb", type=float, default=None,
                   help="bucket size in MiB [./train's default: gradient / 8, 64 KiB..25 MiB]")
    q.set_defaults(func=cmd_project)
    a = ap.parse_args()
    a.func(a)


if __name__ == "__main__":
    main()
