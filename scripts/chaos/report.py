"""scripts/chaos.sh's tally: reads the run's logs in WORK and prints the
table; exits 1 if anything acknowledged is missing downstream, a producer
could not finish, a node died on its own, or a node's RSS passed the bound.

  python3 report.py WORK RSS_MB PRODUCERS_OK DIED_NODES

Logs: fwd.log (FluencyChaos), s2s.log (S2sChaos), kv.log and kvcheck.txt
(kv_chaos.py), sink.txt (KafkaReadBack of the sink topic), subs.log
(subscriber.js), rss.log, faults.log.
"""

import json
import re
import sys
from collections import Counter, defaultdict


def lines(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def main():
    work, rss_mb, producers_ok, died = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4].split()
    failures = []

    # What each producer was acknowledged for, and when acks came.
    ack_times = {"forward": [], "s2s": [], "kv": []}
    acked = {"forward": set(), "s2s": set(), "kv": set()}
    fwd_sent = None
    for line in lines(f"{work}/fwd.log"):
        p = line.split()
        if p[0] == "ACK":
            ack_times["forward"].append(int(p[1]))
        elif p[0] == "SENT":
            fwd_sent = int(p[1])
    if fwd_sent is None:
        failures.append("Fluency did not get every record acknowledged (no SENT)")
    else:
        # Fluency exits SENT only once every chunk was acknowledged.
        acked["forward"] = set(range(fwd_sent))
    s2s_errors = kv_errors = 0
    for line in lines(f"{work}/s2s.log"):
        p = line.split()
        if p[0] == "ACK":
            ack_times["s2s"].append(int(p[1]))
            acked["s2s"].update(range(int(p[2]), int(p[3]) + 1))
        elif p[0] == "ERR":
            s2s_errors += 1
    for line in lines(f"{work}/kv.log"):
        p = line.split()
        if p[0] == "ACK":
            ack_times["kv"].append(int(p[1]))
            acked["kv"].add(int(p[2]))
        elif p[0] == "ERR":
            kv_errors += 1
    if not producers_ok:
        failures.append("a producer exited with an error")

    # Downstream: the Kafka sink topic, and the KV quorum read.
    down = {"forward": Counter(), "s2s": Counter()}
    for line in lines(f"{work}/sink.txt"):
        if line.startswith("s2s-"):
            down["s2s"][int(line[4:])] += 1
        elif line.startswith("{"):
            v = json.loads(line)
            if v.get("run") == "chaos":
                down["forward"][int(v["seq"])] += 1
    missing = {s: len(acked[s] - set(down[s])) for s in ("forward", "s2s")}
    dups = {s: sum(n - 1 for n in down[s].values() if n > 1) for s in ("forward", "s2s")}
    unacked_down = {s: len(set(down[s]) - acked[s]) for s in ("forward", "s2s")}
    kv_check = lines(f"{work}/kvcheck.txt")
    m = re.match(r"checked (\d+) missing (\d+)", kv_check[0] if kv_check else "")
    if not m:
        failures.append("the KV check did not run")
        missing["kv"] = None
    else:
        missing["kv"] = int(m.group(2))
    dups["kv"] = "-"
    unacked_down["kv"] = "-"

    # Subscribers: per session, what it saw, and the acknowledged events
    # between its first and last one that it did not see.
    seen = defaultdict(lambda: {"forward": Counter(), "s2s": Counter()})
    moves = Counter()
    reconnects = Counter()
    connected = set()
    seq_re = re.compile(r'"seq":(\d+)')
    s2s_re = re.compile(r"s2s-(\d+)")
    for line in lines(f"{work}/subs.log"):
        p = line.split(" ", 3)
        if p[0] == "E" and len(p) == 4:
            k, event, payload = p[1], p[2], p[3]
            if event.startswith("logs."):
                for x in seq_re.findall(payload):
                    seen[k]["forward"][int(x)] += 1
            elif event.startswith("s2s."):
                for x in s2s_re.findall(payload):
                    seen[k]["s2s"][int(x)] += 1
        elif p[0] == "D":
            moves[p[1]] += 1
        elif p[0] == "C":
            # A session's first connect is fresh by nature; later ones
            # are reconnects, recovered or not.
            if p[1] in connected:
                reconnects[line.split()[-1]] += 1
            connected.add(p[1])
    # Acknowledged events that no session saw although some session was
    # subscribed before and after them: lost on the way to every
    # subscriber (the backbone), not by one session's move. With the ack
    # time of each, to tell which fault they belong to.
    s2s_ack_at = {}
    for line in lines(f"{work}/s2s.log"):
        p = line.split()
        if p[0] == "ACK":
            for i in range(int(p[2]), int(p[3]) + 1):
                s2s_ack_at[i] = int(p[1])
    lost_to_all = {}
    for s in ("forward", "s2s"):
        union = set()
        for k in seen:
            union.update(seen[k][s])
        if union:
            lo, hi = min(union), max(union)
            lost_to_all[s] = sorted(i for i in acked[s] if lo <= i <= hi and i not in union)
        else:
            lost_to_all[s] = []
    sub = {}
    for s in ("forward", "s2s"):
        got = gaps = dup = 0
        for k in seen:
            c = seen[k][s]
            if not c:
                continue
            got += len(c)
            dup += sum(n - 1 for n in c.values() if n > 1)
            lo, hi = min(c), max(c)
            gaps += sum(1 for i in acked[s] if lo <= i <= hi and i not in c)
        sub[s] = (len(seen), got, gaps, dup)

    src = [("forward", "Fluency → Forward → Kafka sink"), ("s2s", "NiFi S2S client → S2S → Kafka sink"),
           ("kv", "PUT ack=2&from=3 → KV")]
    print()
    print("| source | acknowledged | missing downstream | duplicates downstream | downstream, never acknowledged | client errors/retries |")
    print("|---|---:|---:|---:|---:|---:|")
    errs = {"forward": "-", "s2s": s2s_errors, "kv": kv_errors}
    for s, name in src:
        print(f"| {name} | {len(acked[s]):,} | {missing[s]} | {dups[s]} | {unacked_down[s]} | {errs[s]} |")
        if missing[s]:
            failures.append(f"{s}: {missing[s]} acknowledged events missing downstream")
    print()
    print("| subscribers (socket.io-client) | sessions | events received (unique per session) | acknowledged but missed, within each session's span | duplicates | node moves | reconnects recovered / fresh |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    fresh = reconnects["fresh"]
    for s, name in src[:2]:
        n, got, gaps, dup = sub[s]
        print(f"| {name.split(' →')[0]} events | {n} | {got:,} | {gaps:,} | {dup} | {sum(moves.values())} | {reconnects['recovered']} / {fresh} |")

    for s in ("forward", "s2s"):
        ids = lost_to_all[s]
        if ids:
            where = ""
            if s == "s2s":
                where = " (acknowledged at " + ", ".join(sorted({str(s2s_ack_at[i]) for i in ids})[:5]) + " ms)"
            print(f"\n{s}: {len(ids)} acknowledged events reached no subscriber: ids {ids[0]}..{ids[-1]}{where}")
    print()
    print("| fault | lasted | forward: first ack after | s2s: first ack after | kv: first ack after | longest ack gap (fwd / s2s / kv) |")
    print("|---|---:|---:|---:|---:|---:|")
    notes = []
    for line in lines(f"{work}/faults.log"):
        name, t0, t1, *kv_back = line.split()
        if t0 == "skipped":
            print(f"| {name} | skipped (no tmpfs mount: not root) | | | | |")
            continue
        t0, t1 = int(t0), int(t1)
        cells = []
        gaps = []
        for s in ("forward", "s2s", "kv"):
            after = [t for t in ack_times[s] if t >= t1]
            cells.append(f"{(after[0] - t1) / 1000:.1f} s" if after else "never")
            # The longest silence between acks from the fault's start to
            # the first ack after it ended.
            window = sorted([t for t in ack_times[s] if t < t0][-1:] + [t for t in ack_times[s] if t0 <= t <= t1]
                            + after[:1])
            g = max((b - a for a, b in zip(window, window[1:])), default=0)
            gaps.append(f"{g / 1000:.1f}")
        print(f"| {name} | {(t1 - t0) / 1000:.1f} s | {cells[0]} | {cells[1]} | {cells[2]} | {' / '.join(gaps)} s |")
        if kv_back:
            back = "never, within the settle time" if kv_back[0] == "never" else \
                f"after {(int(kv_back[0]) - t1) / 1000:.1f} s"
            notes.append(f"{name}: node 2 took a write (PUT ack=3&from=3) again {back}")
            readyz = "".join(lines(f"{work}/kv-readyz.json"))
            notes.append(f"{name}: node 2's /readyz afterwards: {readyz}")
            if kv_back[0] == "never" and '"kv: ' not in readyz:
                failures.append("node 2 takes no KV write and /readyz does not say so")

    for n in notes:
        print(f"\n{n}")

    peak = defaultdict(int)
    for line in lines(f"{work}/rss.log"):
        _, node, kb = line.split()
        peak[node] = max(peak[node], int(kb))
    print()
    print("| node | peak RSS (sampled every 0.5 s) | bound |")
    print("|---|---:|---:|")
    for node in sorted(peak):
        mb = peak[node] / 1024
        print(f"| {node} | {mb:.0f} MiB | {rss_mb} MiB |")
        if mb > rss_mb:
            failures.append(f"node {node}: RSS {mb:.0f} MiB over the {rss_mb} MiB bound")
    if len(peak) < 3:
        failures.append("RSS was not sampled for every node")
    for node in died:
        failures.append(f"node {node} died during the run")
    print()
    if failures:
        print("FAILED: " + "; ".join(failures))
        sys.exit(1)
    print("PASSED: nothing acknowledged is missing, every bound held")


if __name__ == "__main__":
    main()
