"""Exercise 3's tests: BucketedDataParallel against torch's DDP, its all_reduces, its overlap.

The model has what real ones have: a frozen layer, a buffer, and a weight tied into two
layers; each rank builds it from a seed of its own, so only the wrapper's broadcast makes the
replicas equal. First, plan_buckets alone, since everything else is built on it. Then two
ranks build the learner's wrapper and report its state and the hooks it registered. Then,
for each bucket cap, they train 5 SGD steps through it and through torch's DDP on the same
data, and report the gradients (and each rank's own, before any reduction), every all_reduce
the wrapper launched (when, how many bytes, and whether asynchronously), and when each
gradient was ready.
"""

import time

import pytest
import torch
import torch.distributed as dist
from ranks import Explained, load_exercise, run_ranks

exercise = load_exercise("ex3_bucketed_ddp")

WORLD_SIZE, STEPS, LR = 2, 5, 0.1
CAPS = (1000, 3000)  # bytes: four buckets and two for the model below, by the rule
F64 = {"dtype": torch.float64}


class Net(torch.nn.Module):
    """Three float64 Linear layers, 8 -> 16 -> 16 -> 4, and what real models add to them.

    A frozen layer and a buffer come first. A fourth layer reuses the middle layer's weight,
    so module.parameters() lists that weight once: the trainable parameters are the three
    layers' weights and biases.
    """

    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = torch.nn.Linear(8, 8, **F64).requires_grad_(False)  # frozen
        self.register_buffer("shift", torch.randn(8, **F64))  # a buffer, not a parameter
        self.first = torch.nn.Linear(8, 16, **F64)  # weight 1024 B, bias 128 B
        self.middle = torch.nn.Linear(16, 16, **F64)  # 2048 B, 128 B
        self.again = torch.nn.Linear(16, 16, bias=False, **F64)
        self.again.weight = self.middle.weight  # tied: one parameter, used twice
        self.last = torch.nn.Linear(16, 4, **F64)  # 512 B, 32 B

    def forward(self, x):
        x = torch.tanh(self.first(self.embed(x) + self.shift))
        x = torch.tanh(self.again(torch.tanh(self.middle(x))))
        return self.last(x)


def describe(model, name):
    """How a message names an entry of the model's state_dict."""
    if name in dict(model.named_buffers()):
        return f"{name} (a buffer)"
    return name if model.get_parameter(name).requires_grad else f"{name} (frozen)"


def trainable(model):
    return [param for param in model.parameters() if param.requires_grad]


def expected_buckets(model, cap):
    """Bucket sizes in bytes by the rule: the trainable parameters in reverse order, a bucket
    closed before it would pass the cap or when the dtype changes."""
    sizes, dtypes = [], []
    for param in reversed(trainable(model)):
        nbytes = param.numel() * param.element_size()
        if sizes and sizes[-1] + nbytes <= cap and dtypes[-1] == param.dtype:
            sizes[-1] += nbytes
        else:
            sizes.append(nbytes)
            dtypes.append(param.dtype)
    return sizes


def batch(rank, step):
    generator = torch.Generator().manual_seed(100 * rank + step)
    x = torch.randn(6, 8, generator=generator, **F64)
    return x, x[:, :4].cos()


def flat_grads(model):
    return torch.cat([param.grad.flatten() for param in trainable(model)])


def state(model):
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def sgd_step(model, rank, step):
    model.zero_grad()
    x, y = batch(rank, step)
    torch.nn.functional.mse_loss(model(x), y).backward()
    with torch.no_grad():
        for param in model.parameters():
            if param.grad is not None:
                param -= LR * param.grad


def names_of(module):
    """{tensor id: how a message names it}, tied weights with both their names."""
    names = {}
    for name, param in module.named_parameters(remove_duplicate=False):
        names[id(param)] = f"{names[id(param)]} (tied to {name})" if id(param) in names else name
    return names


def named(names, params):
    return ", ".join(names[id(param)] for param in params)


def why_left_out(missing, params):
    """What a plan that puts `missing` in no bucket likely forgot."""
    # reversed(params) walks the model backwards, so the model's first parameters fill the
    # bucket still open when the loop ends: the one a plan that forgets to add it drops.
    if missing == params[: len(missing)]:
        return "the last bucket is missing. After the loop, add the bucket still open too"
    return "every trainable parameter belongs to one bucket"


# ---------------------------------------------------------------------------------------------
# plan_buckets, first: the wrapper is built on it, so a fault here is the likeliest cause of
# every later failure
# ---------------------------------------------------------------------------------------------
def test_plan_buckets_puts_each_trainable_parameter_in_one_bucket():
    model = Net(seed=0)
    names, params = names_of(model), trainable(model)
    for cap in CAPS:
        buckets = exercise.plan_buckets(params, bucket_cap_bytes=cap)
        placed = [id(param) for bucket in buckets for param in bucket]
        missing = [param for param in params if id(param) not in placed]
        assert not missing, (
            f"plan_buckets(the model's trainable parameters, bucket_cap_bytes={cap}) put "
            f"{named(names, missing)} in no bucket, so no all_reduce would ever reduce "
            f"{'its' if len(missing) == 1 else 'their'} gradient: {why_left_out(missing, params)}"
        )
        twice = [param for param in params if placed.count(id(param)) > 1]
        assert not twice, (
            f"plan_buckets(the model's trainable parameters, bucket_cap_bytes={cap}) put "
            f"{named(names, twice)} in more than one bucket: each belongs to exactly one"
        )


def test_a_bucket_holds_one_dtype():
    """A flat buffer has one dtype, so a parameter of another dtype starts a new bucket."""
    params = [
        torch.nn.Parameter(torch.zeros(4, dtype=dtype))
        for dtype in (torch.float64, torch.float32, torch.float64)
    ]
    buckets = exercise.plan_buckets(params, bucket_cap_bytes=10**6)
    dtypes = [sorted({str(param.dtype) for param in bucket}) for bucket in buckets]
    # Judged on the buckets as made: a parameter left out is the test above's to name.
    mixed = any(len(kinds) > 1 for kinds in dtypes)
    together = {id(params[0]), id(params[2])}  # the float64 ones, the float32 between them
    joined = any(together <= {id(param) for param in bucket} for bucket in buckets)
    assert not (mixed or joined), (
        f"plan_buckets([float64, float32, float64 parameters], 10**6) made buckets of {dtypes}: "
        "a bucket's flat buffer has one dtype, so a parameter of another dtype starts a new "
        "bucket (three here, whatever the cap)"
    )


# ---------------------------------------------------------------------------------------------
# Construction: the state it leaves, and the hooks it registers
# ---------------------------------------------------------------------------------------------
def construct(rank, cap):
    """The wrapper's module state after construction, and how many hooks it put on what."""
    module, hooks = Net(seed=rank), {}
    names = names_of(module)
    register = torch.Tensor.register_post_accumulate_grad_hook

    def counting(tensor, hook):
        name = names.get(id(tensor), "a tensor that is not a parameter")
        assert tensor.requires_grad, (
            f"BucketedDataParallel registered a hook on {name}, a frozen parameter "
            "(requires_grad=False): it never gets a gradient, so its bucket would never "
            "fill. Give hooks and buckets only to parameters that require grad"
        )
        hooks[name] = hooks.get(name, 0) + 1
        return register(tensor, hook)

    torch.Tensor.register_post_accumulate_grad_hook = counting
    try:
        exercise.BucketedDataParallel(module, bucket_cap_bytes=cap)
    finally:
        torch.Tensor.register_post_accumulate_grad_hook = register
    return {"state": state(module), "hooks": hooks}


def constructed(rank, world_size):
    return {cap: construct(rank, cap) for cap in CAPS}


@pytest.fixture(scope="module")
def construction():
    return run_ranks(constructed, WORLD_SIZE, "exercise 3's BucketedDataParallel(...)")


def test_construction_copies_rank_0s_parameters_and_buffers(construction):
    expected, model = state(Net(seed=0)), Net(seed=0)
    for rank, reports in enumerate(construction):
        differ = [
            describe(model, name)
            for name, tensor in reports[CAPS[0]]["state"].items()
            if not torch.equal(tensor, expected[name])
        ]
        assert not differ, (
            f"after BucketedDataParallel(...), rank {rank}'s {', '.join(differ)} "
            f"{'differ' if len(differ) > 1 else 'differs'} from rank 0's, and the ranks built "
            "their models from different seeds: in __init__, "
            "broadcast rank 0's parameters, frozen ones too, and buffers, as torch's DDP does"
        )


def test_one_hook_per_trainable_parameter(construction):
    model = Net(seed=0)
    names = names_of(model)
    wanted = {names[id(param)] for param in trainable(model)}
    for rank, reports in enumerate(construction):
        for cap, report in reports.items():
            for name in sorted(wanted | set(report["hooks"])):
                count = report["hooks"].get(name, 0)
                tied = " module.parameters() lists a tied weight once." if "tied" in name else ""
                assert count == 1, (
                    f"with bucket_cap_bytes={cap}, rank {rank}'s BucketedDataParallel "
                    f"registered {count} hooks on {name}: one per trainable parameter.{tied}"
                )


# ---------------------------------------------------------------------------------------------
# Training: against torch's DDP, with every all_reduce timed
# ---------------------------------------------------------------------------------------------
def hook_failure(error, name, step, names):
    """Words for an error the wrapper's hook for `name` raised. A tensor among the error's
    arguments (a KeyError's key) would print as its values: say which parameter it is."""
    args = [names.get(id(a), "a tensor") if torch.is_tensor(a) else str(a) for a in error.args]
    words = " ".join(" ".join(args).split())
    if isinstance(error, KeyError) and args == [name]:  # a lookup by the parameter itself
        words = f"nothing is kept under {name}: is it in no bucket?"
    where = f"BucketedDataParallel's hook for {name}, in step {step}'s backward"
    return f"raised {type(error).__name__} in {where}: {words}"


def traced_steps(rank, cap):
    """The learner's wrapper: gradients, all_reduce calls, gradient-ready times per step, and
    each rank's own gradients, as autograd made them before the wrapper's hook saw them."""
    module = Net(seed=rank)
    names = names_of(module)
    ready, own, hooked = [], {}, []

    def before(param):  # registered before the wrapper's hooks: runs first for each parameter
        ready.append(time.perf_counter_ns())
        own[id(param)] = param.grad.clone()
        hooked[:] = [names[id(param)]]

    def after(param):  # registered after them: the wrapper's hook for `param` has returned
        hooked.clear()

    for param in trainable(module):
        param.register_post_accumulate_grad_hook(before)
    model = exercise.BucketedDataParallel(module, bucket_cap_bytes=cap)
    for param in trainable(module):
        param.register_post_accumulate_grad_hook(after)
    all_reduce, calls = dist.all_reduce, []

    def traced(tensor, *args, **kwargs):
        calls.append(
            {
                "ns": time.perf_counter_ns(),
                "async": kwargs.get("async_op", False),
                "bytes": tensor.numel() * tensor.element_size(),
            }
        )
        return all_reduce(tensor, *args, **kwargs)

    steps = []
    for step in range(STEPS):
        ready.clear()
        calls.clear()
        dist.all_reduce = traced
        try:
            sgd_step(model, rank, step)
        except Exception as error:
            if not hooked:  # not raised in the wrapper's hook: torch's words say enough
                raise
            raise Explained(hook_failure(error, hooked[0], step, names)) from error
        finally:
            dist.all_reduce = all_reduce
        steps.append(
            {
                "grads": flat_grads(module),
                "own": torch.cat([own[id(param)].flatten() for param in trainable(module)]),
                "calls": list(calls),
                "last_ready": ready[-1],
            }
        )
    return {"steps": steps, "end": state(module)}


def torch_ddp_steps(rank):
    model = torch.nn.parallel.DistributedDataParallel(Net(seed=rank))
    grads = []
    for step in range(STEPS):
        sgd_step(model, rank, step)
        grads.append(flat_grads(model.module))
    end = state(model.module)
    del model  # DDP goes before its process group does
    return {"grads": grads, "end": end}


def rank_worker(rank, world_size):
    return {"mine": {cap: traced_steps(rank, cap) for cap in CAPS}, "ddp": torch_ddp_steps(rank)}


@pytest.fixture(scope="module")
def ranks():
    return run_ranks(rank_worker, WORLD_SIZE, "exercise 3's training steps", ddp=True)


def never_reduced(model, ours, own, ddp):
    """The parameters whose gradient is still this rank's own where DDP's mean differs."""
    names, params = names_of(model), trainable(model)
    sizes = [param.numel() for param in params]
    pieces = zip(params, ours.split(sizes), own.split(sizes), ddp.split(sizes), strict=True)
    return [
        names[id(param)]
        for param, mine, alone, mean in pieces
        if torch.equal(mine, alone) and not torch.equal(alone, mean)
    ]


@pytest.mark.parametrize("cap", CAPS)
def test_gradients_equal_torch_ddps(ranks, cap):
    model = Net(seed=0)
    for rank, report in enumerate(ranks):
        mine = report["mine"][cap]["steps"]
        for step, (ours, ddp) in enumerate(zip(mine, report["ddp"]["grads"], strict=True)):
            # The likeliest cause first: a gradient no all_reduce touched.
            left = never_reduced(model, ours["grads"], ours["own"], ddp)
            assert not left, (
                f"with bucket_cap_bytes={cap}, rank {rank}'s gradient of {', '.join(left)} in "
                f"step {step} was never reduced: it is still rank {rank}'s own. Every bucket's "
                "all_reduce must be launched and waited for, the last bucket's too"
            )
            difference = (ours["grads"] - ddp).abs().max().item()
            assert difference <= 1e-12, (
                f"with bucket_cap_bytes={cap}, rank {rank}'s gradient in step {step} differs "
                f"from torch DDP's by {difference:.3g}"
            )


@pytest.mark.parametrize("cap", CAPS)
def test_state_after_training_equals_torch_ddps_on_every_rank(ranks, cap):
    for rank, report in enumerate(ranks):
        for name, expected in report["ddp"]["end"].items():
            mine = report["mine"][cap]["end"][name]
            difference = (mine - expected).abs().max().item()
            assert difference <= 1e-12, (
                f"with bucket_cap_bytes={cap}, after {STEPS} SGD steps rank {rank}'s {name} "
                f"differs from torch DDP's by {difference:.3g}"
            )
            assert torch.equal(mine, ranks[0]["mine"][cap]["end"][name]), (
                f"with bucket_cap_bytes={cap}, after {STEPS} SGD steps rank {rank}'s {name} "
                "differs from rank 0's"
            )


@pytest.mark.parametrize("cap", CAPS)
def test_one_asynchronous_all_reduce_per_bucket(ranks, cap):
    buckets = expected_buckets(Net(seed=0), cap)
    for rank, report in enumerate(ranks):
        for step, mine in enumerate(report["mine"][cap]["steps"]):
            calls = mine["calls"]
            sent = [call["bytes"] for call in calls]
            assert sorted(sent) == sorted(buckets), (
                f"with bucket_cap_bytes={cap}, rank {rank}'s backward in step {step} ran "
                f"all_reduces of {sent} bytes; the cap makes {len(buckets)} buckets of "
                f"{buckets} bytes for the trainable parameters, each counted once (a frozen "
                "parameter gets no bucket; a tied weight is one parameter)"
            )
            assert all(call["async"] for call in calls), (
                f"rank {rank} launched an all_reduce without async_op=True: it blocked backward"
            )


@pytest.mark.parametrize("cap", CAPS)
def test_first_all_reduce_starts_before_backward_finishes(ranks, cap):
    for rank, report in enumerate(ranks):
        for step, mine in enumerate(report["mine"][cap]["steps"]):
            first = mine["calls"][0]["ns"] if mine["calls"] else None
            assert first is not None and first < mine["last_ready"], (
                f"with bucket_cap_bytes={cap}, rank {rank}'s first all_reduce in step {step} "
                "started after the last gradient was ready: launch each bucket from the hook "
                "that fills it"
            )
