"""Transformers' own torch code, found behind whatever wraps it, and run in float64.

The Qwen3.5 references (gated_deltanet_ops.py, qwen3_5_linear_attention.py) check
lazytrain against the torch-only path of transformers' modeling_qwen3_5.py. Transformers
wraps those functions, and the wrapping changes between releases: up to 5.24 a hub-kernel
decorator made a function whose `__wrapped__` is the torch function; from 5.25 (with the
`kernels` package a hard dependency) `causal_conv1d_fn` and `torch_chunk_gated_delta_rule`
are `nn.Module` instances whose class's `forward` calls that wrapper from a closure.

So the torch path is found by what it is, not by how it is wrapped: from the module's
attribute, every `__wrapped__`, bound method, closure cell and callable object's
`forward` is searched for the function whose code was compiled from the modeling file
under the expected name. Nothing else qualifies, and a failure names the transformers
version and what was searched.

Float64: `module_namespace(m, float64=True)` copies the module's globals with every
function defined in the file rebuilt (its torch path) over that copy, whose `torch` is a
view of the torch module in which `torch.float32` is float64. The functions cast their
inputs to float32 themselves; through the copy they cast to float64, and each calls the
others' float64 copies. Nothing else in them changes: the reference is still transformers'
code.
"""
import contextlib
import types

import torch
import transformers

_MAX_DEPTH = 8


class _Float64Torch(types.ModuleType):
    def __init__(self):
        super().__init__("torch")

    def __getattr__(self, name):
        return torch.float64 if name == "float32" else getattr(torch, name)


def _is_code_of(fn, module, name):
    return (isinstance(fn, types.FunctionType) and fn.__code__.co_filename == module.__file__
            and fn.__code__.co_name == name)


def _inner_callables(obj):
    """What a wrapper may hold its wrapped callable in."""
    if isinstance(obj, types.MethodType):
        yield obj.__func__
    wrapped = getattr(obj, "__wrapped__", None)
    if wrapped is not None:
        yield wrapped
    if isinstance(obj, types.FunctionType):
        for cell in obj.__closure__ or ():
            try:
                content = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if callable(content) and not isinstance(content, type):
                yield content
    elif callable(obj) and not isinstance(obj, type):  # a callable object: a module made from a function
        for attr in ("forward", "__call__"):
            method = getattr(type(obj), attr, None)
            if isinstance(method, types.FunctionType):
                yield method


def find_torch_path(module, name, obj, required=True):
    """The function `name` defined in `module`'s file that `obj` is or wraps, else None
    (or, when `required`, an error naming the transformers version)."""
    seen, frontier = set(), [obj]
    for _ in range(_MAX_DEPTH):
        following = []
        for o in frontier:
            if id(o) in seen:
                continue
            seen.add(id(o))
            if _is_code_of(o, module, name):
                return o
            following.extend(_inner_callables(o))
        frontier = following
    if required:
        raise RuntimeError(
            f"transformers {transformers.__version__}: no torch implementation of `{name}` from {module.__file__} "
            f"behind {type(obj).__module__}.{type(obj).__qualname__} (searched __wrapped__, closures and "
            f"forward methods {_MAX_DEPTH} deep). The reference needs updating for this version; the tested "
            f"version is pinned in scripts/requirements/test.txt.")
    return None


def _rebuild(fn, namespace):
    return types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__, fn.__closure__)


def module_namespace(module, float64):
    """The module's globals with each function defined in its file replaced by its torch
    path over these globals; with float64, `torch.float32` there is float64."""
    namespace = dict(vars(module))
    if float64:
        namespace["torch"] = _Float64Torch()
    for name, obj in vars(module).items():
        if isinstance(obj, (type, types.ModuleType)) or not callable(obj):
            continue
        fn = find_torch_path(module, name, obj, required=False)
        if fn is not None:
            namespace[name] = _rebuild(fn, namespace)
    return namespace


def function(namespace, module, name):
    """The module-level function `name` from `namespace`, checked to be the file's code."""
    fn = namespace.get(name)
    if not _is_code_of(fn, module, name):
        raise RuntimeError(f"transformers {transformers.__version__}: {module.__name__} defines no function `{name}` "
                           f"(found {type(fn).__qualname__}); the reference needs updating for this version")
    return fn


def method(namespace, module, cls, name):
    """`cls.name`'s torch path, rebuilt over `namespace` (decorators such as kwarg
    deprecations and accelerate hooks are left out: they do not change the math)."""
    return _rebuild(find_torch_path(module, name, getattr(cls, name)), namespace)


@contextlib.contextmanager
def float_keeps_float64():
    """Tensor.float() leaves float64 tensors float64 (the layer calls it on A_log and a)."""
    original = torch.Tensor.float

    def keep(self, *args, **kwargs):
        return self if self.dtype == torch.float64 else original(self, *args, **kwargs)

    torch.Tensor.float = keep
    try:
        yield
    finally:
        torch.Tensor.float = original
