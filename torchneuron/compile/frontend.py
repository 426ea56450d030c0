"""The Dynamo backend `neuron`: AOTAutograd with core ATen decompositions and the min-cut
rematerialization partitioner; each forward, backward and inference graph goes through
serialize -> graph compiler (C) -> C compiler -> cached shared object -> Program."""
import functools
import itertools
import logging
import time
import warnings


from . import ops, runtime, serialize, toolchain

log = logging.getLogger("torchneuron.compile")
_counter = itertools.count()
programs = []          # every Program / EagerProgram built in this process (for compile_stats)


@functools.lru_cache(maxsize=None)
def decompositions():
    from torch._decomp import core_aten_decompositions

    table = dict(core_aten_decompositions())
    keep = set(ops.KEEP_UNDECOMPOSED)
    return {op: fn for op, fn in table.items() if op.name().split("::")[1].split(".")[0] not in keep}


def _eager_fallback(gm, name, reason):
    """A graph the compiler cannot take runs op by op, with one warning naming the reason."""
    warnings.warn(f"torchneuron: graph {name} runs op by op (not compiled): {reason}")
    prog = runtime.EagerProgram(gm, name, reason)
    programs.append(prog)
    return prog


def compile_graph(gm, example_inputs, kind="forward"):
    """Compile one ATen FX graph into a callable taking the (boxed) list of its inputs.  A graph the
    serializer or the graph compiler cannot take (or a defect of either) runs op by op with one
    warning instead of raising, so does a program the C compiler rejects while it builds a trivial
    one (a code generation defect); only a C compiler that builds nothing (an environment problem,
    CompileError) and a lock timeout raise."""
    name = f"{kind}{next(_counter)}"
    t0 = time.perf_counter()
    try:
        ser = serialize.serialize(gm, example_inputs)
    except serialize.Unsupported as e:
        return _eager_fallback(gm, name, str(e))
    except Exception as e:  # a defect of the serializer: the graph still runs
        log.warning("torchneuron: serializing %s failed", name, exc_info=True)
        return _eager_fallback(gm, name, f"the serializer failed: {e.__class__.__name__}: {e}")
    nc = toolchain.graph_compiler()
    st, source, plan_text, fusion_log, err = nc.compile(ser.ir)
    if st != 0 and (ser.mutations or ser.scalars):
        log.info("torchneuron: %s: in-place input writes / launch-time scalars rejected (%s); eager instead",
                 name, err)
        try:
            ser = serialize.serialize(gm, example_inputs, inplace=False, scalars=False)
        except Exception as e:
            return _eager_fallback(gm, name, f"the serializer failed: {e.__class__.__name__}: {e}")
        st, source, plan_text, fusion_log, err = nc.compile(ser.ir)
    if st != 0:
        return _eager_fallback(gm, name, f"the graph compiler rejected it: {err}")
    try:
        plan = runtime.Plan(plan_text)
        lib, key = None, None
        if plan.segs:
            key, lib = toolchain.load_program(source, {"graph.ir": ser.ir, "plan.txt": plan_text,
                                                       "fusion.log": fusion_log})
        prog = runtime.Program(ser, plan, lib, key, gm, name)
    except toolchain.CompileError as e:
        if not toolchain.compiler_works(tuple(toolchain.c_compiler())):
            raise  # the C compiler itself is broken or missing: an environment problem, say so
        log.warning("torchneuron: the C compiler rejected the program of %s", name, exc_info=True)
        return _eager_fallback(gm, name, f"the C compiler rejected its generated program: {str(e)[:2000]}")
    except TimeoutError:
        raise
    except Exception as e:  # a plan or program the runtime cannot bind: run the graph op by op
        log.warning("torchneuron: loading %s failed", name, exc_info=True)
        return _eager_fallback(gm, name, f"the compiled program could not be set up: {e.__class__.__name__}: {e}")
    prog.aten_ops = sum(n for k, n in ser.kinds.items() if k != "V")
    prog.fusion_log = fusion_log
    prog.compile_seconds = time.perf_counter() - t0
    toolchain.stats.graphs_compiled += 1
    toolchain.stats.compile_seconds += prog.compile_seconds
    programs.append(prog)
    log.info("torchneuron: compiled %s: %d ATen ops -> %d kernels (%d eager), %d launches, %.3f s",
             name, prog.aten_ops, plan.nkernels, prog.eager_steps, prog.launches_per_call, prog.compile_seconds)
    return prog


@functools.lru_cache(maxsize=None)
def _aot_backend():
    from functorch.compile import min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd

    return aot_autograd(
        fw_compiler=functools.partial(compile_graph, kind="forward"),
        bw_compiler=functools.partial(compile_graph, kind="backward"),
        inference_compiler=functools.partial(compile_graph, kind="inference"),
        decompositions=decompositions(),
        partition_fn=min_cut_rematerialization_partition,
        keep_inference_input_mutations=True,  # copy_ into inputs stays in the graph: written in place
    )


def backend(gm, example_inputs, **kwargs):
    """The Dynamo backend function (`torch.compile(model, backend="neuron")`)."""
    return _aot_backend()(gm, example_inputs)
