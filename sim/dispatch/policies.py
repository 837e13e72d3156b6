"""The dispatching policies: their integer codes inside this model's compiled kernels, and the
messages each one spends per job.

Kernels branch on these codes once, outside their hot loops (never on jitted functions passed
as arguments: see docs/architecture.md); the Python drivers map policy names to them.
"""
RANDOM, JSQ, POD, BATCH_FILLING, BATCH_SAMPLING, POD_PER_TASK = 0, 1, 2, 3, 4, 5

#: policy name -> kernel code
POLICY_CODES: dict[str, int] = {
    "random": RANDOM,          # uniform server (per task when k > 1)
    "jsq": JSQ,                # join the shortest queue (per task when k > 1)
    "pod": POD,                # power-of-d, single-task jobs (k = 1)
    "batch_filling": BATCH_FILLING,    # k tasks into k*d sampled queues, each into the current shortest
    "batch_sampling": BATCH_SAMPLING,  # k tasks to the k shortest of k*d sampled queues
    "pod_per_task": POD_PER_TASK,      # each task samples its own k*d queues and joins the shortest
}

#: policies for parallel (k-task) jobs that sample queues; with k = 1 each is power-of-d
BATCH_POLICIES = ("batch_filling", "batch_sampling", "pod_per_task")


def probes_per_job(policy: str, n_servers: int, k: int, d: int) -> int:
    """Queue-length probes of one job: random 0, jsq N per task, pod d, batch policies k*d
    (one sample of k*d queues per job), pod_per_task k*k*d (k*d per task)."""
    return {"random": 0, "jsq": n_servers * k, "pod": d, "batch_filling": k * d,
            "batch_sampling": k * d, "pod_per_task": k * k * d}[policy]


def messages_per_job(policy: str, n_servers: int, k: int, d: int) -> float:
    """One-way messages of one job, the project's one unit: a probe is a request and a reply,
    so 2 per probed queue (power-of-d: 2d per job, as the multi-dispatcher paper counts)."""
    return 2.0 * probes_per_job(policy, n_servers, k, d)
