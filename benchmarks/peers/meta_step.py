#!/usr/bin/env python3
"""The platipus meta-step workloads in PyTorch and JAX, for side-by-side timing.

Workloads (the same as benchmarks/meta_step.cpp):
  maml      second-order MAML: 25 tasks, 10 support + 10 query points each,
            5 inner SGD steps (alpha 0.01), MSE, one Adam step on theta.
  platipus  PLATIPUS (Algorithm 1 with the Section 4.4 prior): the same tasks,
            posterior and prior means after one gradient step, reparameterised
            sample, 5 inner steps, query MSE + 1.5 * KL, one Adam step on
            (mu, log sigma2, log v_q, log gamma_p, log gamma_q).
Networks: small = 1-40-40-1 ReLU; paper = 20-dim bias transformation + 3 x 100 ReLU.

Image workloads (maml only, as benchmarks/conv_workloads.hpp): second-order
MAML on 5-way 1-shot tasks with 15 queries per class (5 support and 75 query
images per task), 5 inner SGD steps, softmax cross-entropy, one Adam step, on
MAML's conv4 as the examples train it: 4 blocks of 3x3 convolution with
bias, batch norm (each task's batch statistics, no running statistics; scale
and shift adapted in the inner loop like every parameter), ReLU and 2x2 max
pooling, then a linear layer. --no-batch-norm drops the batch norm (platipus's
maml_conv4_no_bn benchmarks):
  conv4-miniimagenet  84x84x3 images, 32 filters, meta-batch 4
  conv4-omniglot      28x28x1 images, 64 filters, meta-batch 32
Random images and labels: only the arithmetic is timed. Both frameworks run
in full float32 (--precision fp32, the default: no TF32 in convolutions or
matrix products, as platipus computes); --precision tf32 leaves each
framework's GPU default.

Modes: torch "loop" (the usual per-task Python loop, eager), torch "vmap"
(torch.func / functorch vmap over tasks, eager), jax "jit" (jit + vmap), and
platipus "step" (the platipus Python package, docs/python.md: one
learner.meta_step call per step from Python, with the C++ benchmark's
settings, for the package's overhead over benchmarks/meta_step.cpp; MLP
workloads only).

Prints one JSON line: {"framework", "mode", "algorithm", "network", "device",
"ms_per_step" (median over repeats), "repeats", "peak_resident_mb" and, on
the GPU, "peak_device_mb"}.
"""
import argparse
import json
import math
import random
import statistics
import time

TASKS, POINTS, INNER_STEPS, ALPHA, KL_WEIGHT = 25, 10, 5, 0.01, 1.5
# network: (channels, size, filters, meta-batch); 5-way 1-shot, 15 queries per class.
CONV_NETWORKS = {"conv4-miniimagenet": (3, 84, 32, 4), "conv4-omniglot": (1, 28, 64, 32)}
WAYS, SHOTS, QUERIES = 5, 1, 15


def layer_sizes(network):
    return [1, 40, 40, 1] if network == "small" else [21, 100, 100, 100, 1]


def sinusoid_batch(rng):
    """[xs, ys, xq, yq] as nested lists [tasks][points][1]: x ~ U[-5, 5],
    y = A sin(x + phase), A ~ U[0.1, 5], phase ~ U[0, pi]. Plain Python, so
    that neither framework's copy of NumPy matters."""
    xs, ys, xq, yq = [], [], [], []
    for _ in range(TASKS):
        amp, phase = rng.uniform(0.1, 5.0), rng.uniform(0, math.pi)
        for x_list, y_list in ((xs, ys), (xq, yq)):
            x = [rng.uniform(-5, 5) for _ in range(POINTS)]
            x_list.append([[v] for v in x])
            y_list.append([[amp * math.sin(v + phase)] for v in x])
    return [xs, ys, xq, yq]


def init_params(network, rng):
    """Weights U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (platipus's and PyTorch's default) and zero biases,
    as nested lists, with a zero bias transformation first for "paper"."""
    sizes = layer_sizes(network)
    params = [[0.0] * 20] if network == "paper" else []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        bound = 1 / math.sqrt(fan_in)
        params.append([[rng.uniform(-bound, bound) for _ in range(fan_out)] for _ in range(fan_in)])
        params.append([0.0] * fan_out)
    return params


# ---------------------------------------------------------------- PyTorch
def run_torch(args):
    import torch
    device = torch.device(args.device)
    rng = random.Random(0)
    batch = [torch.tensor(a, dtype=torch.float32, device=device) for a in sinusoid_batch(rng)]
    bias_transform = args.network == "paper"

    def forward(params, x):
        if bias_transform:
            x = torch.cat([x, params[0].expand(*x.shape[:-1], 20)], -1)
            params = params[1:]
        for i in range(0, len(params), 2):
            x = x @ params[i] + params[i + 1]
            if i + 2 < len(params):
                x = torch.relu(x)
        return x

    def mse(params, x, y):
        return ((forward(params, x) - y) ** 2).mean()

    def sgd(params, grads, step):
        return [p - step * g for p, g in zip(params, grads)]

    base = [torch.tensor(p, dtype=torch.float32, device=device, requires_grad=True)
            for p in init_params(args.network, rng)]
    if args.algorithm == "maml":
        meta = base
    else:
        meta = base + [torch.full_like(p, v, requires_grad=True) for v in (math.log(0.01),) * 4
                       for p in base]
    optimizer = torch.optim.Adam(meta, lr=1e-3)
    count = len(base)

    if args.mode == "loop":
        def task_objective(t):
            xs, ys, xq, yq = (b[t] for b in batch)
            if args.algorithm == "maml":
                fast = base
                for _ in range(INNER_STEPS):
                    fast = sgd(fast, torch.autograd.grad(mse(fast, xs, ys), fast, create_graph=True), ALPHA)
                return mse(fast, xq, yq)
            mu, log_s2, log_vq, gp, gq = (meta[i * count:(i + 1) * count] for i in range(5))
            gp, gq = [torch.exp(g_) for g_ in gp], [torch.exp(g_) for g_ in gq]  # step sizes stored as logs
            gq_grad = torch.autograd.grad(mse(mu, xq, yq), mu, create_graph=True)
            mu_q = [m - g_ * d for m, g_, d in zip(mu, gq, gq_grad)]
            gp_grad = torch.autograd.grad(mse(mu, xs, ys), mu, create_graph=True)
            mu_p = [m - g_ * d for m, g_, d in zip(mu, gp, gp_grad)]
            fast = [m + torch.exp(0.5 * lv) * torch.randn_like(m) for m, lv in zip(mu_q, log_vq)]
            for _ in range(INNER_STEPS):
                fast = sgd(fast, torch.autograd.grad(mse(fast, xs, ys), fast, create_graph=True), ALPHA)
            kl = sum(0.5 * (ls - lv + (torch.exp(lv) + (mq - mp) ** 2) / torch.exp(ls) - 1).sum()
                     for mq, mp, ls, lv in zip(mu_q, mu_p, log_s2, log_vq))
            return mse(fast, xq, yq) + KL_WEIGHT * kl

        def meta_step():
            optimizer.zero_grad()
            (sum(task_objective(t) for t in range(TASKS)) / TASKS).backward()
            optimizer.step()
    else:
        try:
            from torch.func import grad, vmap
        except ImportError:  # PyTorch 1.13: functorch
            from functorch import grad, vmap

        def adapt(params, xs, ys):
            for _ in range(INNER_STEPS):
                params = sgd(params, grad(mse)(params, xs, ys), ALPHA)
            return params

        if args.algorithm == "maml":
            def objective(params, xs, ys, xq, yq):
                return mse(adapt(params, xs, ys), xq, yq)
            batched = vmap(objective, in_dims=(None, 0, 0, 0, 0))

            def meta_step():
                optimizer.zero_grad()
                batched(base, *batch).mean().backward()
                optimizer.step()
        else:
            def objective(theta, xs, ys, xq, yq, eps):
                mu, log_s2, log_vq, gp, gq = (theta[i * count:(i + 1) * count] for i in range(5))
                gp, gq = [torch.exp(g_) for g_ in gp], [torch.exp(g_) for g_ in gq]  # step sizes stored as logs
                mu_q = [m - g_ * d for m, g_, d in zip(mu, gq, grad(mse)(mu, xq, yq))]
                mu_p = [m - g_ * d for m, g_, d in zip(mu, gp, grad(mse)(mu, xs, ys))]
                fast = adapt([m + torch.exp(0.5 * lv) * e for m, lv, e in zip(mu_q, log_vq, eps)], xs, ys)
                kl = sum(0.5 * (ls - lv + (torch.exp(lv) + (mq - mp) ** 2) / torch.exp(ls) - 1).sum()
                         for mq, mp, ls, lv in zip(mu_q, mu_p, log_s2, log_vq))
                return mse(fast, xq, yq) + KL_WEIGHT * kl
            batched = vmap(objective, in_dims=(None, 0, 0, 0, 0, 0))

            def meta_step():
                optimizer.zero_grad()
                eps = [torch.randn(TASKS, *p.shape, device=device) for p in base]
                batched(meta, *batch, eps).mean().backward()
                optimizer.step()

    return meta_step


def torch_timed(torch, device, meta_step):
    """A timed() that runs meta_step once, waiting for the GPU on both sides."""
    def timed():
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        meta_step()
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start
    return timed


def conv_shapes(network, batch_norm):
    """[(shape, init)] of conv4's parameters for a network of CONV_NETWORKS, in OIHW, in
    platipus's layout order: per block the filters, their bias and, with batch norm, its scale
    and shift; then the linear layer's weight and bias. init: "fan_in" (uniform in +-1/sqrt(fan
    in)), "zeros" or "ones"."""
    channels, size, filters, _ = CONV_NETWORKS[network]
    shapes = []
    for _ in range(4):
        shapes += [((filters, channels, 3, 3), "fan_in"), ((filters,), "zeros")]
        if batch_norm:
            shapes += [((filters,), "ones"), ((filters,), "zeros")]
        channels, size = filters, size // 2
    return shapes + [((filters * size * size, WAYS), "fan_in"), ((WAYS,), "zeros")]


def fan_in_bound(shape):
    return 1 / math.sqrt(math.prod(shape[1:]) if len(shape) == 4 else shape[0])


def run_torch_conv(args):
    import torch
    import torch.nn.functional as F
    device = torch.device(args.device)
    channels, size, _, tasks = CONV_NETWORKS[args.network]
    generator = torch.Generator().manual_seed(0)
    support, query = WAYS * SHOTS, WAYS * QUERIES
    xs = torch.randn(tasks, support, channels, size, size, generator=generator).to(device)
    xq = torch.randn(tasks, query, channels, size, size, generator=generator).to(device)
    ys = (torch.arange(support) % WAYS).repeat(tasks, 1).to(device)
    yq = (torch.arange(query) % WAYS).repeat(tasks, 1).to(device)
    base = []
    for shape, init in conv_shapes(args.network, args.batch_norm):
        if init == "fan_in":
            value = (torch.rand(shape, generator=generator) * 2 - 1) * fan_in_bound(shape)
        else:
            value = torch.zeros(shape) if init == "zeros" else torch.ones(shape)
        base.append(value.to(device).requires_grad_())
    optimizer = torch.optim.Adam(base, lr=1e-3)
    per_block = 4 if args.batch_norm else 2

    def forward(params, x):
        for i in range(0, 4 * per_block, per_block):
            x = F.conv2d(x, params[i], params[i + 1], padding=1)
            if args.batch_norm:  # the batch's statistics, as MAML's reference code
                x = F.batch_norm(x, None, None, params[i + 2], params[i + 3], training=True)
            x = F.max_pool2d(F.relu(x), 2)
        return x.flatten(1) @ params[-2] + params[-1]

    def loss(params, x, y):
        return F.cross_entropy(forward(params, x), y)

    if args.mode == "loop":
        def task_objective(t):
            fast = base
            for _ in range(INNER_STEPS):
                grads = torch.autograd.grad(loss(fast, xs[t], ys[t]), fast, create_graph=True)
                fast = [p - ALPHA * g for p, g in zip(fast, grads)]
            return loss(fast, xq[t], yq[t])

        def meta_step():
            optimizer.zero_grad()
            (sum(task_objective(t) for t in range(tasks)) / tasks).backward()
            optimizer.step()
    else:
        try:
            from torch.func import grad, vmap
        except ImportError:  # PyTorch 1.13: functorch
            from functorch import grad, vmap

        def objective(params, x_s, y_s, x_q, y_q):
            for _ in range(INNER_STEPS):
                params = [p - ALPHA * g for p, g in zip(params, grad(loss)(params, x_s, y_s))]
            return loss(params, x_q, y_q)
        batched = vmap(objective, in_dims=(None, 0, 0, 0, 0))

        def meta_step():
            optimizer.zero_grad()
            batched(base, xs, ys, xq, yq).mean().backward()
            optimizer.step()
    return meta_step


# ---------------------------------------------------------------- JAX
def run_jax_conv(args):
    import jax
    import jax.numpy as jnp
    device = jax.devices("gpu" if args.device == "cuda" else "cpu")[0]
    channels, size, _, tasks = CONV_NETWORKS[args.network]
    keys = jax.random.split(jax.random.PRNGKey(0), 16)
    support, query = WAYS * SHOTS, WAYS * QUERIES
    batch = [jax.device_put(a, device) for a in (
        jax.random.normal(keys[0], (tasks, support, channels, size, size)),
        jnp.tile(jnp.arange(support) % WAYS, (tasks, 1)),
        jax.random.normal(keys[1], (tasks, query, channels, size, size)),
        jnp.tile(jnp.arange(query) % WAYS, (tasks, 1)))]
    theta = []
    shapes = conv_shapes(args.network, args.batch_norm)
    for k, (shape, init) in zip(jax.random.split(keys[2], len(shapes)), shapes):
        if init == "fan_in":
            bound = fan_in_bound(shape)
            value = jax.random.uniform(k, shape, minval=-bound, maxval=bound)
        else:
            value = jnp.zeros(shape) if init == "zeros" else jnp.ones(shape)
        theta.append(jax.device_put(value, device))
    per_block = 4 if args.batch_norm else 2

    def channel(v):
        return v[None, :, None, None]

    def forward(params, x):
        for i in range(0, 4 * per_block, per_block):
            x = jax.lax.conv_general_dilated(x, params[i], (1, 1), ((1, 1), (1, 1)),
                                             dimension_numbers=("NCHW", "OIHW", "NCHW"))
            x = x + channel(params[i + 1])
            if args.batch_norm:  # the batch's statistics, biased variance, epsilon 1e-5
                mean = jnp.mean(x, axis=(0, 2, 3), keepdims=True)
                variance = jnp.mean(jnp.square(x - mean), axis=(0, 2, 3), keepdims=True)
                x = (x - mean) / jnp.sqrt(variance + 1e-5) * channel(params[i + 2]) + channel(params[i + 3])
            x = jax.nn.relu(x)
            x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
        return x.reshape(x.shape[0], -1) @ params[-2] + params[-1]

    def loss(params, x, y):
        logp = jax.nn.log_softmax(forward(params, x))
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    def objective(params, x_s, y_s, x_q, y_q):
        for _ in range(INNER_STEPS):
            params = [p - ALPHA * g for p, g in zip(params, jax.grad(loss)(params, x_s, y_s))]
        return loss(params, x_q, y_q)

    def meta_loss(params, key):  # no sampling: the key is unused
        return jnp.mean(jax.vmap(objective, in_axes=(None, 0, 0, 0, 0))(params, *batch))
    return adam_loop(jax, jnp, meta_loss, theta)


def adam_loop(jax, jnp, meta_loss, theta):
    """A timed() that runs one jitted step of Adam (lr 1e-3) on meta_loss(theta, key), a fresh
    key each step."""
    @jax.jit
    def meta_step(theta, m, v, t, key):
        g = jax.grad(meta_loss)(theta, key)
        m = [0.9 * a + 0.1 * b for a, b in zip(m, g)]
        v = [0.999 * a + 0.001 * b * b for a, b in zip(v, g)]
        theta = [p - 1e-3 * (a / (1 - 0.9 ** t)) / (jnp.sqrt(b / (1 - 0.999 ** t)) + 1e-8)
                 for p, a, b in zip(theta, m, v)]
        return theta, m, v

    state = {"theta": theta, "m": [jnp.zeros_like(p) for p in theta],
             "v": [jnp.zeros_like(p) for p in theta], "t": 0, "key": jax.random.PRNGKey(0)}

    def timed():
        state["t"] += 1
        state["key"], key = jax.random.split(state["key"])
        start = time.perf_counter()
        theta, m, v = meta_step(state["theta"], state["m"], state["v"], float(state["t"]), key)
        jax.block_until_ready(theta)
        state.update(theta=theta, m=m, v=v)
        return time.perf_counter() - start
    return timed


def run_jax(args):
    import jax
    import jax.numpy as jnp
    device = jax.devices("gpu" if args.device == "cuda" else "cpu")[0]
    rng = random.Random(0)
    batch = [jax.device_put(jnp.array(a, jnp.float32), device) for a in sinusoid_batch(rng)]
    bias_transform = args.network == "paper"

    def forward(params, x):
        if bias_transform:
            x = jnp.concatenate([x, jnp.broadcast_to(params[0], (*x.shape[:-1], 20))], -1)
            params = params[1:]
        for i in range(0, len(params), 2):
            x = x @ params[i] + params[i + 1]
            if i + 2 < len(params):
                x = jax.nn.relu(x)
        return x

    def mse(params, x, y):
        return jnp.mean((forward(params, x) - y) ** 2)

    def adapt(params, xs, ys):
        for _ in range(INNER_STEPS):
            params = [p - ALPHA * g for p, g in zip(params, jax.grad(mse)(params, xs, ys))]
        return params

    base = [jax.device_put(jnp.array(p, jnp.float32), device) for p in init_params(args.network, rng)]
    count = len(base)
    if args.algorithm == "maml":
        meta = base

        def objective(theta, xs, ys, xq, yq, eps):
            return mse(adapt(theta, xs, ys), xq, yq)
    else:
        meta = base + [jnp.full_like(p, v) for v in (math.log(0.01),) * 4 for p in base]

        def objective(theta, xs, ys, xq, yq, eps):
            mu, log_s2, log_vq, gp, gq = (theta[i * count:(i + 1) * count] for i in range(5))
            gp, gq = [jnp.exp(g_) for g_ in gp], [jnp.exp(g_) for g_ in gq]  # step sizes stored as logs
            mu_q = [m - g_ * d for m, g_, d in zip(mu, gq, jax.grad(mse)(mu, xq, yq))]
            mu_p = [m - g_ * d for m, g_, d in zip(mu, gp, jax.grad(mse)(mu, xs, ys))]
            fast = adapt([m + jnp.exp(0.5 * lv) * e for m, lv, e in zip(mu_q, log_vq, eps)], xs, ys)
            kl = sum(0.5 * jnp.sum(ls - lv + (jnp.exp(lv) + (mq - mp) ** 2) / jnp.exp(ls) - 1)
                     for mq, mp, ls, lv in zip(mu_q, mu_p, log_s2, log_vq))
            return mse(fast, xq, yq) + KL_WEIGHT * kl

    def meta_loss(theta, key):
        eps = [jax.random.normal(k, (TASKS, *p.shape)) for k, p in zip(jax.random.split(key, count), base)]
        return jnp.mean(jax.vmap(objective, in_axes=(None, 0, 0, 0, 0, 0))(theta, *batch, eps))

    return adam_loop(jax, jnp, meta_loss, meta)


def run_platipus(args):
    """benchmarks/meta_step.cpp's maml_sinusoid/0 and platipus_sinusoid through
    the Python package: the same seeds, batch and settings (one chunk of
    tasks per thread), each step one meta_step call."""
    import platipus as pp
    gen = pp.Generator(1 if args.algorithm == "maml" else 2)
    if args.network == "small":
        network = pp.mlp(inputs=1, hidden=[40, 40], outputs=1)
    else:
        network = pp.mlp(inputs=1, hidden=[100, 100, 100], outputs=1, bias_transform=20)
    learner = (pp.Maml if args.algorithm == "maml" else pp.Platipus)(
        network, pp.MseLoss(), generator=gen, task_chunks=-1,
        inner_loop={"steps": INNER_STEPS, "learning_rate": ALPHA})
    batch = pp.SinusoidLine(support=POINTS, query=POINTS).sample(TASKS, gen)

    def timed():
        start = time.perf_counter()
        learner.meta_step(*batch)
        return time.perf_counter() - start
    return timed


def measure(args):
    """Times args' workload: warm-up steps, then the median of args.repeats
    timed steps; returns the result line as a dict."""
    args.mode = args.mode or {"jax": "jit", "platipus": "step"}.get(args.framework, "loop")
    conv = args.network in CONV_NETWORKS
    if conv and args.algorithm != "maml":
        raise SystemExit(f"{args.network}: only --algorithm maml")
    if conv and args.framework == "platipus":
        raise SystemExit(f"{args.network}: the platipus package's timing covers the MLP workloads")
    if args.framework == "platipus":
        timed = run_platipus(args)
    elif args.framework == "torch":
        import torch
        if args.threads:
            torch.set_num_threads(args.threads)
        if args.device == "cuda":  # the peak of this workload alone
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
        timed = torch_timed(torch, args.device, (run_torch_conv if conv else run_torch)(args))
    else:
        import jax
        jax.config.update("jax_default_matmul_precision", "highest" if args.precision == "fp32" else "default")
        timed = (run_jax_conv if conv else run_jax)(args)
    for _ in range(args.warmup):
        timed()
    times = [timed() for _ in range(args.repeats)]
    device_mb = peak_device_mb(args.framework) if args.device == "cuda" else None
    return {"framework": args.framework, "mode": args.mode, "algorithm": args.algorithm,
            "network": args.network, "device": args.device, "precision": args.precision,
            "batch_norm": args.batch_norm if conv else None,
            "ms_per_step": round(1000 * statistics.median(times), 3), "repeats": args.repeats,
            "peak_resident_mb": round(peak_resident_mb()), "peak_device_mb": device_mb}


def peak_device_mb(framework):
    """The GPU memory the framework's allocator has reserved at its peak, comparable with platipus's device_MB:
    PyTorch's max_memory_reserved since this workload began, JAX's peak_bytes_in_use over the process's life
    (so one JAX workload per process for its own figure)."""
    if framework == "torch":
        import torch
        return round(torch.cuda.max_memory_reserved() / 1e6)
    import jax
    stats = jax.devices()[0].memory_stats() or {}
    return round(stats["peak_bytes_in_use"] / 1e6) if "peak_bytes_in_use" in stats else None


def peak_resident_mb():
    """The process's peak resident set (Linux: ru_maxrss in KiB), interpreter included."""
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def parser():
    result = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    result.add_argument("--framework", choices=["torch", "jax", "platipus"], default="torch")
    result.add_argument("--mode", choices=["loop", "vmap", "jit", "step"], default=None)
    result.add_argument("--algorithm", choices=["maml", "platipus"], default="maml")
    result.add_argument("--network", choices=["small", "paper", *CONV_NETWORKS], default="small")
    result.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    result.add_argument("--warmup", type=int, default=3)
    result.add_argument("--repeats", type=int, default=20)
    result.add_argument("--precision", choices=["fp32", "tf32"], default="fp32",
                        help="fp32: full float32 on the GPU (no TF32); tf32: the framework's GPU default")
    result.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave the default)")
    result.add_argument("--no-batch-norm", dest="batch_norm", action="store_false",
                        help="conv4 without batch norm (the image workloads have it by default)")
    return result


def main():
    print(json.dumps(measure(parser().parse_args())))


if __name__ == "__main__":
    main()
