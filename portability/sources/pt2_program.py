"""The program JSON of a ``.pt2`` archive, vetted before torch parses any of it (``torch_export.vet``):
torch 2.13's deserializer hands shape expressions to sympy's ``eval`` and FX's code generator writes names
and stack traces into ``exec``-ed code, so every string, name, operator and expression must be plain:
ATen/prims operators (no file or print ops), plain identifiers, sympy-only shape expressions, plain
container tree specs, no custom objects, no control characters.
"""
from __future__ import annotations

import ast
import json
import re

_MAX_DEPTH = 400

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FQN = re.compile(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
_NAME_KEYS = {"name", "as_name", "parameter_name", "buffer_name", "tensor_constant_name", "user_input_name", "fqn"}
_NAMED_DICTS = {"tensor_values", "sym_int_values", "sym_bool_values", "sym_float_values", "range_constraints"}
_CUSTOM = {"custom_obj", "as_custom_obj", "class_fqn", "custom_obj_name"}
_ATEN = re.compile(r"torch\.ops\.(aten|prims)\.([A-Za-z_][A-Za-z0-9_]*)(\.[A-Za-z_][A-Za-z0-9_]*)?")
_DENIED_OPS = {"from_file", "save", "_print"}  # ATen ops that read or write files or print
_HOPS = {"cond", "while_loop", "map_impl", "scan", "wrap_with_set_grad_enabled", "wrap_with_autocast"}
_PYTHON_OPS = ({f"_operator.{n}" for n in ("getitem", "eq", "ne", "le", "ge", "lt", "gt", "neg", "pos", "mul", "add",
                                           "sub", "floordiv", "mod", "pow", "truediv", "and_", "or_", "lshift", "rshift")}
               | {f"torch.{n}" for n in ("sym_not", "sym_int", "sym_float", "sym_ite", "sym_max", "sym_min", "sym_sqrt")}
               | {"math.trunc"})
#: what ``srepr`` of a shape expression may call: sympy's classes and torch's shape functions
_SYMPY = {"Symbol", "Integer", "Rational", "Float", "Add", "Mul", "Pow", "Max", "Min", "Mod", "Abs", "floor",
          "ceiling", "sqrt", "Equality", "Unequality", "StrictLessThan", "LessThan", "StrictGreaterThan",
          "GreaterThan", "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "And", "Or", "Not", "Piecewise", "ExprCondPair",
          "FloorDiv", "ModularIndexing", "Where", "PythonMod", "CleanDiv", "CeilToInt", "FloorToInt", "CeilDiv",
          "IntTrueDiv", "FloatTrueDiv", "LShift", "RShift", "IsNonOverlappingAndDenseIndicator", "TruncToFloat",
          "TruncToInt", "RoundToInt", "RoundDecimal", "ToFloat", "FloatPow", "PowByNatural", "Identity",
          "IntInfinity", "NegativeIntInfinity", "Infinity", "NegativeInfinity", "NaN", "ComplexInfinity",
          "BooleanTrue", "BooleanFalse", "One", "Zero", "NegativeOne", "Half"}
_SYMPY_FN = re.compile(r"(OpaqueUnaryFn|BitwiseFn)_[a-z0-9_]+")
_SYMPY_NAMES = _SYMPY | {"true", "false", "oo", "zoo", "nan", "int_oo"}
_AST_OK = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Call, ast.Name, ast.Load,
           ast.Constant, ast.keyword, ast.operator, ast.unaryop, ast.boolop, ast.cmpop)
_TREESPEC_TYPES = {None, "builtins.tuple", "builtins.list", "builtins.dict", "collections.OrderedDict",
                   "torch.fx.immutable_collections.immutable_list", "torch.fx.immutable_collections.immutable_dict"}


# -- the program JSON -----------------------------------------------------------------------------------------

def _name(value, what: str, fqn: bool = False) -> None:
    ok = isinstance(value, str) and (_FQN if fqn else _NAME).fullmatch(value) is not None
    if not ok or any(p.startswith("__") and p.endswith("__") for p in value.split(".")):
        raise ValueError(f"{what} {str(value)[:60]!r} is not a plain name")


def _expr(s) -> None:
    """A symbolic shape expression that sympy's ``eval`` may parse: sympy constructors of numbers and names."""
    if not isinstance(s, str) or len(s) > 20_000:
        raise ValueError("a symbolic expression is not a short string")
    try:
        nodes = list(ast.walk(ast.parse(s, mode="eval")))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise ValueError(f"symbolic expression {s[:60]!r} does not parse") from None
    if len(nodes) > 5_000 or not all(_plain_sympy(n) for n in nodes):
        raise ValueError(f"symbolic expression {s[:60]!r} is not a sympy shape expression (sympy would eval it)")


def _plain_sympy(n: ast.AST) -> bool:
    """Calls of sympy constructors by name, symbol names, numbers, short strings, flags: no attribute, no
    builtin, no other call (sympy evaluates the string with Python's builtins in reach)."""
    if isinstance(n, ast.Call):
        return isinstance(n.func, ast.Name) and (n.func.id in _SYMPY or _SYMPY_FN.fullmatch(n.func.id) is not None)
    if isinstance(n, ast.Name):
        return n.id in _SYMPY_NAMES or re.fullmatch(r"[a-z]+\d+", n.id) is not None
    if isinstance(n, ast.keyword):
        return n.arg is not None and re.fullmatch(r"[a-z][a-z_]*", n.arg) is not None
    if isinstance(n, ast.Constant):
        text = n.value if isinstance(n.value, str) else ""
        return isinstance(n.value, (int, float, bool)) or re.fullmatch(r"[\w.+\-]*", text) is not None and text == n.value
    return isinstance(n, _AST_OK)


def _target(s) -> None:
    m = _ATEN.fullmatch(s) if isinstance(s, str) else None
    if m and m.group(2) not in _DENIED_OPS:
        return
    if isinstance(s, str) and (s in _PYTHON_OPS or (s.startswith("torch.ops.higher_order.") and s[23:] in _HOPS)):
        return
    raise ValueError(f"operator {str(s)[:80]!r} is not an ATen operator (torch would call whatever it names)")


def _treespec(s) -> None:
    """A pytree spec of tuples, lists and dicts with plain keys (its keys are written into generated code)."""
    try:
        doc = json.loads(s)
    except (TypeError, ValueError, RecursionError):
        raise ValueError("an input/output structure is not valid JSON") from None
    stack = [doc[1]] if isinstance(doc, list) and len(doc) == 2 else [None]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict) or node.get("type") not in _TREESPEC_TYPES:
            kind = node.get("type") if isinstance(node, dict) and isinstance(node.get("type"), str) else None
            shown = kind[:120] if kind and re.fullmatch(r"[\w.]+", kind) else None
            raise ValueError(f"an input/output structure holds {shown or 'something other than tuples, lists and dicts'}"
                             + (" (only tuples, lists and dicts are read: export a module that returns a tuple — for a "
                                "Hugging Face model, return_dict=False)" if shown else ""))
        keys = json.loads(node["context"]) if isinstance(node.get("context"), str) else None
        for k in keys if isinstance(keys, list) else []:
            if not isinstance(k, (int, str)) or (isinstance(k, str) and re.search(r"['\"\\]", k)):
                raise ValueError(f"an input/output key {str(k)[:40]!r} is not plain")
        stack.extend(node.get("children_spec") or [])


def _check_value(key, value) -> None:
    """The rule for one value of the program JSON, by the key it sits under."""
    if (key in _CUSTOM or key == "custom_obj_values") and value:
        raise ValueError("a custom object (torch.export.load would unpickle or call into it)")
    if key == "expr_str":
        _expr(value)
    elif key in ("target", "as_operator"):
        _target(value)
    elif key in _NAME_KEYS and value not in ("", None):
        _name(value, key, fqn=key != "name" and key != "as_name")
    elif key == "forward_arg_names" and value is not None:
        for v in value if isinstance(value, list) else [value]:
            _name(v, "argument")
    elif key in ("in_spec", "out_spec"):
        _treespec(value)
    elif key in _NAMED_DICTS and isinstance(value, dict):
        for k in value:
            _name(k, "value name")


def vet_program(doc) -> None:
    """Every string, name, operator and expression of the program JSON, before torch parses any of it."""
    if not isinstance(doc, dict) or not isinstance(doc.get("graph_module"), dict):
        raise ValueError("not an exported program")
    stack = [(None, doc, 0)]
    while stack:
        key, value, depth = stack.pop()
        if depth > _MAX_DEPTH:
            raise ValueError("nested too deeply")
        if isinstance(value, str) and _CONTROL.search(value):
            raise ValueError(f"a control character in {str(key)[:40]!r}")
        _check_value(key, value)
        if isinstance(value, dict):
            for k, v in value.items():
                if _CONTROL.search(k):
                    raise ValueError("a control character in a key")
                stack.append((k, v, depth + 1))
        elif isinstance(value, list):
            stack.extend((f"{key}[]", v, depth + 1) for v in value)
