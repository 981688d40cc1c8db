"""Properties checked with Hypothesis on random small scenes and random client input.

- adding a wall never reduces cover (a wall can only add hits to lines);
- mirroring or transposing the map gives the same annotations (one-way walls keep their
  meaning when their side is re-expressed in the reflected map);
- the decoder turns any input into a request or a ClientError, never another exception;
- a single-pair evaluation equals that pair's entry in the all-pairs evaluation.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import msgpack
import msgspec
import pytest
from hypothesis import HealthCheck, example, given, reject, settings
from hypothesis import strategies as st

from rulesets import REGISTRY
from rulesets.base import Annotation, AttackMode, Degree, pair_indices, pair_rows
from server import messages
from server import scene as scenes
from server.errors import ClientError
from server.messages import REQUEST_TYPES, decode_frame, parse_request

PROPS = settings(max_examples=80, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
FUZZ = settings(max_examples=100, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

SIZE = 100          # pixels per square
W = H = 1000        # scene extent: a 10x10 grid
ORDER = [Degree.NONE, Degree.SOFT, Degree.COVER, Degree.IMPROVED, Degree.TOTAL]

Doc = dict[str, Any]


# -- scenes ----------------------------------------------------------------------------------

coord = st.integers(0, W // 50).map(lambda k: k * 50)


@st.composite
def wall_docs(draw: st.DrawFn, wall_id: str) -> Doc:
    c = draw(st.lists(coord, min_size=4, max_size=4).filter(
        lambda c: (c[0], c[1]) != (c[2], c[3])))
    doc: Doc = {"id": wall_id, "c": c,
                "sight": draw(st.sampled_from([20, 20, 20, 10, 0])),
                "dir": draw(st.sampled_from([0, 0, 1, 2]))}
    door = draw(st.sampled_from([(0, 0), (0, 0), (1, 0), (1, 1)]))
    doc["door"], doc["ds"] = door
    flags: Doc = {}
    cover = draw(st.sampled_from([None, None, "solid", "low", "improved"]))
    if cover is not None:
        flags["covercast"] = {"cover": cover}
    top = draw(st.sampled_from([None, None, None, 1, 3, 10]))
    if top is not None:
        flags["wall-height"] = {"top": top}
    if flags:
        doc["flags"] = flags
    return doc


@st.composite
def scene_docs(draw: st.DrawFn) -> Doc:
    n = draw(st.integers(2, 5))
    cells = draw(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)),
                          min_size=n, max_size=n, unique=True))
    tokens = [{"id": f"t{k}", "x": col * SIZE, "y": row * SIZE, "width": 1, "height": 1,
               "disposition": draw(st.sampled_from([1, -1]))}
              for k, (col, row) in enumerate(cells)]
    nw = draw(st.integers(0, 6))
    walls = [draw(wall_docs(f"w{k}")) for k in range(nw)]
    return {"id": "s", "grid": {"type": 1, "size": SIZE, "distance": 5, "units": "ft"},
            "width": W, "height": H, "tokens": tokens, "walls": walls}


options_st = st.fixed_dictionaries({
    "softCoverVsReach": st.booleans(),
    "lowObstacleRangeFrom": st.sampled_from(["attacker", "target"]),
})


def load(doc: Doc, options: Doc | None = None, ruleset: str = "dnd35") -> scenes.Scene:
    req = parse_request({"type": "scene.load", "scene": doc, "options": options or {},
                         "ruleset": ruleset})
    assert isinstance(req, messages.SceneLoad)
    return scenes.load(req.scene, req.ruleset, req.options, None)


def evaluate(doc: Doc, options: Doc | None = None,
             pairs: list[tuple[str, str]] | None = None,
             modes: tuple[AttackMode, ...] = tuple(AttackMode),
             lines: bool = False, ruleset: str = "dnd35"
             ) -> dict[tuple[str, str, str], Annotation]:
    scene = load(doc, options, ruleset)
    anns = scene.ruleset.annotate(scene.geometry, scene.options, pairs=pairs, modes=modes,
                                  lines=lines)
    out = {a.key(): a for a in anns}
    assert len(out) == len(anns)
    return out


# -- (a) adding a wall never reduces cover --------------------------------------------------

@PROPS
@given(scene_docs(), wall_docs("added"), options_st)
def test_adding_a_wall_never_reduces_cover(doc: Doc, wall: Doc, options: Doc) -> None:
    before = evaluate(doc, options)
    more = copy.deepcopy(doc)
    more["walls"].append(wall)
    after = evaluate(more, options)
    assert before.keys() == after.keys()
    for key, ann in before.items():
        new = after[key]
        assert ORDER.index(new.cover) >= ORDER.index(ann.cover), (key, ann.cover, new.cover)
        # Line of effect can only be lost, never gained.
        assert not (new.loe and not ann.loe), key


def test_adding_a_wall_example_raises_cover() -> None:
    doc: Doc = {"id": "s", "grid": {"type": 1, "size": SIZE}, "tokens": [
        {"id": "a", "x": 0, "y": 0}, {"id": "b", "x": 500, "y": 0}], "walls": []}
    before = evaluate(doc)[("a", "b", "ranged")]
    doc["walls"] = [{"id": "w", "c": [300, -100, 300, 200]}]
    after = evaluate(doc)[("a", "b", "ranged")]
    assert (before.cover, after.cover) == (Degree.NONE, Degree.TOTAL)


def test_wall_behind_an_arrow_slit_does_not_lower_cover() -> None:
    # Found by the property above. An archer shoots past the end of an arrow slit (improved
    # cover); a solid wall is then built just behind the slit, over the same stretch. Every
    # line that passed the slit is now blocked, the others are as free as before: the
    # target must not become easier to hit.
    doc: Doc = {"id": "s", "grid": {"type": 1, "size": SIZE}, "tokens": [
        {"id": "a", "x": 0, "y": 0}, {"id": "b", "x": 400, "y": 0}],
        "walls": [{"id": "slit", "c": [200, -200, 200, 80],
                   "flags": {"covercast": {"cover": "improved"}}}]}
    before = evaluate(doc)[("a", "b", "ranged")].cover
    doc["walls"].append({"id": "solid", "c": [250, -200, 250, 80]})
    after = evaluate(doc)[("a", "b", "ranged")].cover
    assert before is Degree.IMPROVED
    assert ORDER.index(after) >= ORDER.index(before), after


# -- (b) reflections -------------------------------------------------------------------------

_SWAP_DIR = {0: 0, 1: 2, 2: 1}
Point = tuple[float, float]


def reflect(doc: Doc, point: Callable[[float, float], Point], transpose: bool,
            one_way: str) -> Doc:
    """The scene under a reflection of the plane.

    A reflection reverses orientation, so a point left of A->B is right of A'->B'. Foundry
    names a one-way wall's open side by orientPoint (the sign of orient2d(A, B, origin)), so
    the reflected wall keeps its meaning either by swapping LEFT and RIGHT (`swap_dir`) or by
    reversing its endpoints (`reverse_ends`), each of which flips the sign once more; doing
    both (or neither) turns the wall around (`none`, used to show the difference matters).
    """
    out = copy.deepcopy(doc)
    for w in out["walls"]:
        x0, y0 = point(w["c"][0], w["c"][1])
        x1, y1 = point(w["c"][2], w["c"][3])
        if one_way == "reverse_ends":
            w["c"] = [x1, y1, x0, y0]
        else:
            w["c"] = [x0, y0, x1, y1]
        if one_way == "swap_dir":
            w["dir"] = _SWAP_DIR[w.get("dir", 0)]
    for t in out["tokens"]:
        w_px = t.get("width", 1) * SIZE
        h_px = t.get("height", 1) * SIZE
        # Reflect the whole footprint and take its new top-left corner.
        xa, ya = point(t["x"], t["y"])
        xb, yb = point(t["x"] + w_px, t["y"] + h_px)
        t["x"], t["y"] = min(xa, xb), min(ya, yb)
        if transpose:
            t["width"], t["height"] = t.get("height", 1), t.get("width", 1)
    return out


REFLECTIONS: dict[str, tuple[Callable[[float, float], Point], bool]] = {
    "mirror_x": (lambda x, y: (W - x, y), False),
    "mirror_y": (lambda x, y: (x, H - y), False),
    "transpose": (lambda x, y: (y, x), True),
}


def test_reflected_token_corner() -> None:
    # x' = W - x - width * size, as stated for mirroring in x.
    doc: Doc = {"walls": [], "tokens": [{"id": "a", "x": 200, "y": 300, "width": 2,
                                         "height": 2}]}
    (t,) = reflect(doc, REFLECTIONS["mirror_x"][0], False, "swap_dir")["tokens"]
    assert (t["x"], t["y"]) == (W - 200 - 2 * SIZE, 300)


def _without_lines(anns: dict[tuple[str, str, str], Annotation]
                   ) -> dict[tuple[str, str, str], Annotation]:
    return {k: msgspec.structs.replace(a, lines=None) for k, a in anns.items()}


@pytest.mark.parametrize("one_way", ["swap_dir", "reverse_ends"])
@pytest.mark.parametrize("name", sorted(REFLECTIONS))
@PROPS
@given(doc=scene_docs(), options=options_st)
def test_reflection_keeps_annotations(name: str, one_way: str, doc: Doc,
                                      options: Doc) -> None:
    point, transpose = REFLECTIONS[name]
    before = _without_lines(evaluate(doc, options))
    after = _without_lines(evaluate(reflect(doc, point, transpose, one_way), options))
    assert before.keys() == after.keys()
    diff = {k: (before[k], after[k]) for k in before if before[k] != after[k]}
    assert not diff, next(iter(diff.items()))


OTHER_RULESETS = [name for name in REGISTRY.names() if name != "dnd35"]
FEWER = settings(PROPS, max_examples=40)


@pytest.mark.parametrize("name", sorted(REFLECTIONS))
@pytest.mark.parametrize("ruleset", OTHER_RULESETS)
@FEWER
@given(doc=scene_docs())
def test_reflection_keeps_annotations_other_rulesets(ruleset: str, name: str,
                                                     doc: Doc) -> None:
    point, transpose = REFLECTIONS[name]
    before = _without_lines(evaluate(doc, ruleset=ruleset))
    after = _without_lines(evaluate(reflect(doc, point, transpose, "swap_dir"),
                                    ruleset=ruleset))
    diff = {k: (before[k], after[k]) for k in before if before[k] != after[k]}
    assert before.keys() == after.keys() and not diff, next(iter(diff.items()))


def _one_way_scene() -> Doc:
    # A one-way wall between two archers: it blocks one direction only.
    return {"id": "s", "grid": {"type": 1, "size": SIZE}, "width": W, "height": H,
            "tokens": [{"id": "a", "x": 100, "y": 400}, {"id": "b", "x": 700, "y": 400}],
            "walls": [{"id": "w", "c": [500, 0, 500, 1000], "dir": 1}]}


def test_one_way_wall_blocks_one_direction_and_reflects_correctly() -> None:
    doc = _one_way_scene()
    base = evaluate(doc)
    ab, ba = base[("a", "b", "ranged")].cover, base[("b", "a", "ranged")].cover
    assert {ab, ba} == {Degree.NONE, Degree.TOTAL}
    for name, (point, transpose) in REFLECTIONS.items():
        for one_way in ("swap_dir", "reverse_ends"):
            got = evaluate(reflect(doc, point, transpose, one_way))
            assert (got[("a", "b", "ranged")].cover, got[("b", "a", "ranged")].cover) == (
                ab, ba), (name, one_way)
        # Reflecting without re-expressing the side turns the wall around.
        naive = evaluate(reflect(doc, point, transpose, "none"))
        assert (naive[("a", "b", "ranged")].cover, naive[("b", "a", "ranged")].cover) == (
            ba, ab), name


# -- (d) single pair == entry of all pairs ---------------------------------------------------

@pytest.mark.parametrize("ruleset", ["dnd35", *OTHER_RULESETS])
@PROPS
@given(doc=scene_docs(), options=options_st, lines=st.booleans())
def test_single_pair_equals_all_pairs_entry(ruleset: str, doc: Doc, options: Doc,
                                            lines: bool) -> None:
    if ruleset != "dnd35":
        options = {}
    everything = evaluate(doc, options, lines=lines, ruleset=ruleset)
    ids = [t["id"] for t in doc["tokens"]]
    for a in ids:
        for t in ids:
            if a == t:
                continue
            single = evaluate(doc, options, pairs=[(a, t)], lines=lines, ruleset=ruleset)
            assert set(single) == {(a, t, m.value) for m in AttackMode}
            for key, ann in single.items():
                assert ann == everything[key], key


@PROPS
@given(doc=scene_docs(), mode=st.sampled_from(list(AttackMode)), data=st.data())
def test_single_mode_single_pair_equals_all_pairs_entry(doc: Doc, mode: AttackMode,
                                                        data: st.DataObject) -> None:
    ids = [t["id"] for t in doc["tokens"]]
    a, t = data.draw(st.permutations(ids))[:2]
    everything = evaluate(doc)
    (ann,) = evaluate(doc, pairs=[(a, t)], modes=(mode,)).values()
    assert ann == everything[(a, t, mode.value)]


# -- (c) decoder fuzz ------------------------------------------------------------------------

def decode_and_parse(frame: bytes | str) -> messages.Request | ClientError:
    """What the session does with a frame; any exception other than ClientError escapes."""
    try:
        return parse_request(decode_frame(frame))
    except ClientError as exc:
        assert isinstance(exc.message, str) and exc.message, exc
        assert str(exc) == exc.message
        return exc


@FUZZ
@given(st.binary(max_size=300))
@example(b"")
@example(b"\xc1")                                      # never-used msgpack byte
@example(b"\x81\xc4\x00\x01")                          # {b'': 1}: an empty bin as key
@example(b"\xc7\x00\x05")                              # empty ext
@example(b"\xd6\xff\x00\x00\x00\x00")                  # a timestamp ext
@example(b"\x91" * 5000)                               # deep nesting
@example(b"\xdd\xff\xff\xff\xff")                      # huge array header
def test_any_bytes_decode_or_client_error(frame: bytes) -> None:
    decode_and_parse(frame)


@FUZZ
@given(st.text(max_size=300))
@example("")
@example("NaN")
@example('{"type": "hello", "protocol": Infinity}')
@example("[" * 5000)
@example("1e999")
@example("9" * 5000)
@example('"\\ud800"')
def test_any_text_decode_or_client_error(frame: str) -> None:
    decode_and_parse(frame)


# Every field name the schema knows, so random maps hit real fields as well as unknown ones.
def _schema_names() -> list[str]:
    names = {"_id", "type", "wall-height", "covercast", "tokenHeight"}
    for obj in vars(messages).values():
        if isinstance(obj, type) and issubclass(obj, msgspec.Struct):
            names.update(f.encode_name for f in msgspec.structs.fields(obj))
    return sorted(names)


FIELD_NAMES = _schema_names()
keys = (st.sampled_from(FIELD_NAMES)
        | st.text(alphabet="ab_-.[]`$ 0", max_size=5)
        | st.text(max_size=8))
scalars = (st.none() | st.booleans() | st.integers(-(2 ** 63), 2 ** 64 - 1)
           | st.floats(allow_nan=False, allow_infinity=False)
           | st.text(max_size=10) | st.sampled_from(list(REQUEST_TYPES)))
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=5),
    max_leaves=25)


@FUZZ
@given(json_values)
@example({"type": "unsubscribe", "scene": "s", "0.x": None})
def test_packed_values_decode_or_client_error(value: Any) -> None:
    decode_and_parse(msgpack.packb(value))
    decode_and_parse(json.dumps(value))


# A valid request of every type: the structured fuzz mutates these.
VALID: dict[str, Doc] = {
    "hello": {"type": "hello", "protocol": 1, "client": "fuzz", "id": 1},
    "scene.load": {"type": "scene.load", "id": "r", "ruleset": "dnd35",
                   "options": {"softCoverVsReach": True},
                   "scene": {"_id": "s", "grid": {"type": 1, "size": 100},
                             "walls": [{"_id": "w", "c": [0, 0, 100, 0], "dir": 1,
                                        "flags": {"covercast": {"cover": "low"},
                                                  "wall-height": {"top": 5}}}],
                             "tokens": [{"id": "t", "x": 0, "y": 100, "size": "large",
                                         "flags": {"wall-height": {"tokenHeight": 3}}}],
                             "regions": [{"id": "g", "kind": "cover",
                                          "points": [0, 0, 100, 0, 100, 100]}]}},
    "token.create": {"type": "token.create", "scene": "s",
                     "tokens": [{"_id": "t", "x": 1.5, "y": 2, "width": 2, "height": 2}]},
    "token.update": {"type": "token.update", "scene": "s", "tokens": [{"_id": "t", "x": 3}]},
    "token.delete": {"type": "token.delete", "scene": "s", "ids": ["t"]},
    "wall.create": {"type": "wall.create", "scene": "s",
                    "walls": [{"id": "w", "c": [0, 0, 1, 1], "door": 1, "ds": 1}]},
    "wall.update": {"type": "wall.update", "scene": "s", "walls": [{"id": "w", "ds": 0}]},
    "wall.delete": {"type": "wall.delete", "scene": "s", "ids": ["w"]},
    "cover.query": {"type": "cover.query", "scene": "s", "attacker": "a", "target": "b",
                    "attack": "melee", "origin": {"x": 1, "y": 2}, "lines": True},
    "area.query": {"type": "area.query", "scene": "s",
                   "template": {"t": "cone", "x": 100, "y": 100, "distance": 30,
                                "direction": 45, "angle": 90, "_id": "tpl"}},
    "subscribe": {"type": "subscribe", "scene": "s", "modes": ["ranged"], "lines": False},
    "unsubscribe": {"type": "unsubscribe", "scene": "s"},
}


def test_valid_requests_parse() -> None:
    # Request types without a hand-written example are still fuzzed by random_requests.
    assert set(VALID) <= set(REQUEST_TYPES)
    for kind, doc in VALID.items():
        req = parse_request(copy.deepcopy(doc))
        assert msgspec.inspect.type_info(type(req)).tag == kind  # type: ignore[attr-defined]


def _slots(obj: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    """Every place inside a plain value (dict keys and list indices), depth first."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield (*path, k)
            yield from _slots(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield (*path, i)
            yield from _slots(v, (*path, i))


def _parent(obj: Any, path: tuple[str | int, ...]) -> Any:
    for step in path[:-1]:
        obj = obj[step]
    return obj


@st.composite
def mutated_requests(draw: st.DrawFn) -> Doc:
    """A valid request of a random type, then a few random edits: replace a value, drop a
    key, add a key (schema names and arbitrary ones)."""
    doc = copy.deepcopy(VALID[draw(st.sampled_from(sorted(VALID)))])
    for _ in range(draw(st.integers(1, 3))):
        slots = [s for s in _slots(doc) if s != ("type",)]
        if not slots:  # everything but the type was dropped: add a field back
            doc[draw(keys)] = draw(json_values)
            continue
        where = draw(st.sampled_from(slots))
        parent = _parent(doc, where)
        action = draw(st.sampled_from(["replace", "replace", "drop", "add"]))
        if action == "replace":
            parent[where[-1]] = draw(json_values)
        elif action == "drop" and isinstance(parent, dict):
            del parent[where[-1]]
        elif isinstance(parent, dict):
            parent[draw(keys)] = draw(json_values)
        elif isinstance(parent, list):
            parent.append(draw(json_values))
    return doc


@st.composite
def random_requests(draw: st.DrawFn) -> Doc:
    """A map with a valid type and random fields and values."""
    doc: Doc = draw(st.dictionaries(keys, json_values, max_size=6))
    doc["type"] = draw(st.sampled_from(list(REQUEST_TYPES)))
    return doc


def parse_or_located_error(doc: Doc) -> messages.Request | ClientError:
    try:
        return parse_request(doc)
    except ClientError as exc:
        assert exc.message, exc
        assert exc.path is not None and exc.path.startswith("$"), exc.message
        return exc


@FUZZ
@given(random_requests() | mutated_requests())
@example({"type": "hello", "protocol": 1, "client": "x", "a.b": 1})
@example({"type": "subscribe", "scene": "s", "x[0]": 1})
def test_structured_requests_parse_or_client_error_with_path(doc: Doc) -> None:
    parse_or_located_error(doc)


_STEP = re.compile(r'\.([^.\[]+)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]')


def _resolves(doc: Any, path: str) -> bool:
    """Whether a ClientError path names a place that exists in the request (`id` also names
    a document's `_id`, which the decoder reads as its id)."""
    assert path.startswith("$")
    obj = doc
    for plain, index, quoted in _STEP.findall(path[1:]):
        name: str | None = json.loads(quoted) if quoted else (plain or None)
        if name is not None:
            if not isinstance(obj, dict):
                return False
            if name in obj:
                obj = obj[name]
            elif name == "id" and "_id" in obj:
                obj = obj["_id"]
            else:
                return False
        else:
            if not isinstance(obj, list) or int(index) >= len(obj):
                return False
            obj = obj[int(index)]
    return True


@FUZZ
@given(mutated_requests())
@example({"type": "token.create", "scene": "s",
          "tokens": [{"_id": "b", "id": "c", "x": 0, "y": 0}]})
def test_error_paths_point_into_the_request(doc: Doc) -> None:
    original = copy.deepcopy(doc)
    try:
        parse_request(doc)
    except ClientError as exc:
        assert exc.path is not None
        assert _resolves(original, exc.path), (exc.path, exc.message)
    except Exception:
        reject()  # other exceptions are the business of the property above


# -- decoder regressions found by the fuzz ---------------------------------------------------

@pytest.mark.parametrize("name", ["a.b", "x[0]", "a`b"])
def test_unknown_field_with_punctuation_is_a_client_error(name: str) -> None:
    doc: Doc = {"type": "hello", "protocol": 1, "client": "x", name: 1}
    with pytest.raises(ClientError) as info:
        parse_request(doc)
    assert info.value.path is not None and name in info.value.message


def test_conflicting_ids_in_a_nested_document_name_that_document() -> None:
    doc: Doc = {"type": "token.create", "scene": "s",
                "tokens": [{"id": "a", "x": 0, "y": 0},
                           {"_id": "b", "id": "c", "x": 0, "y": 0}]}
    with pytest.raises(ClientError) as info:
        parse_request(doc)
    assert info.value.path == "$.tokens[1].id", info.value.message


def test_non_string_map_key_error_names_the_map() -> None:
    frame = msgpack.packb({"type": "scene.load",
                           "scene": {"id": "s", "grid": {"type": 1}, b"": 1}})
    with pytest.raises(ClientError) as info:
        parse_request(decode_frame(frame))
    assert info.value.path == "$.scene", info.value.message


# -- (e) dnd35's columnar rows == its row-by-row annotations ---------------------------------

@st.composite
def crowded_docs(draw: st.DrawFn) -> Doc:
    """Scenes for the row paths: big creatures among small ones, allies and foes close
    enough to flank, GM floors, elevations."""
    doc = draw(scene_docs())
    for tok in doc["tokens"]:
        size = draw(st.sampled_from([1, 1, 1, 2, 3, 0.5]))
        tok["width"] = tok["height"] = size
        tok["elevation"] = draw(st.sampled_from([0, 0, 0, 5, 10]))
        floor = draw(st.sampled_from([None, None, None, "soft", "cover", "improved"]))
        if floor is not None:
            tok["flags"] = {"covercast": {"cover": floor}}
    return doc


@pytest.mark.parametrize("ruleset", ["dnd35", "pf1"])
@PROPS
@given(doc=crowded_docs(), options=options_st)
def test_rows_without_lines_equal_rows_with_lines(ruleset: str, doc: Doc,
                                                   options: Doc) -> None:
    # dnd35 without lines builds its annotations from arrays (`_annotate_columns`); with
    # lines, row by row (`_annotation`). pf1 reads probes and always goes row by row.
    if ruleset != "dnd35":
        options = {}
    with_lines = _without_lines(evaluate(doc, options, lines=True, ruleset=ruleset))
    assert evaluate(doc, options, ruleset=ruleset) == with_lines


# -- (f) dnd5e: its paths agree, and walls only add cover ------------------------------------

dnd5e_options_st = st.fixed_dictionaries({
    "flanking": st.booleans(),
    "creatureCover": st.sampled_from(["lines", "half", "none"]),
})
#: dnd35's GM floors in crowded_docs, as the dnd5e degrees they stand for.
_DND5E_FLOORS = {"soft": "half", "cover": "half", "improved": "three_quarters"}


def _as_dnd5e(doc: Doc) -> Doc:
    doc = copy.deepcopy(doc)
    for tok in doc["tokens"]:
        floor = tok.get("flags", {}).get("covercast", {}).get("cover")
        if floor is not None:
            tok["flags"]["covercast"]["cover"] = _DND5E_FLOORS[floor]
    return doc


@PROPS
@given(doc=crowded_docs(), options=dnd5e_options_st)
def test_dnd5e_columns_rows_and_reference_agree(doc: Doc, options: Doc) -> None:
    # Without lines dnd5e builds its annotations from arrays, with lines row by row; the
    # engine's fast plan equals its straightforward reference, every mode read as one.
    from rulesets.dnd5e import CoverLines

    doc = _as_dnd5e(doc)
    with_lines = _without_lines(evaluate(doc, options, lines=True, ruleset="dnd5e"))
    assert evaluate(doc, options, ruleset="dnd5e") == with_lines
    scene = load(doc, options, "dnd5e")
    engine = CoverLines(scene.geometry, scene.options)
    n = len(scene.geometry.creatures)
    rows = [(a, t, m) for a in range(n) for t in range(n) if a != t for m in AttackMode]
    assert engine.evaluate(rows, True) == engine.reference(rows, True)


@PROPS
@given(scene_docs(), wall_docs("added"), dnd5e_options_st)
def test_dnd5e_adding_a_wall_never_reduces_cover(doc: Doc, wall: Doc, options: Doc) -> None:
    ladder = [Degree.NONE, Degree.HALF, Degree.THREE_QUARTERS, Degree.TOTAL]
    before = evaluate(doc, options, ruleset="dnd5e")
    more = copy.deepcopy(doc)
    more["walls"].append(wall)
    after = evaluate(more, options, ruleset="dnd5e")
    for key, ann in before.items():
        new = after[key]
        assert ladder.index(new.cover) >= ladder.index(ann.cover), (key, ann.cover, new.cover)
        assert not (new.loe and not ann.loe), key


@given(st.integers(0, 12), st.data())
def test_pair_rows_are_pair_indices(n: int, data: st.DataObject) -> None:
    """The rows a ruleset evaluates, made as an array, are the pairs the list gives, in
    its order: every ordered pair, or those asked for (repeats and all)."""
    ids = [f"c{k}" for k in range(n)]
    index = {c: k for k, c in enumerate(ids)}
    assert pair_rows(n, index, None).tolist() == [list(p) for p in pair_indices(n, index, None)]
    asked = data.draw(st.lists(st.tuples(st.sampled_from(ids), st.sampled_from(ids)))
                      if ids else st.just([]))
    rows = pair_rows(n, index, asked)
    assert rows.shape == (len(asked), 2)
    assert rows.tolist() == [list(p) for p in pair_indices(n, index, asked)]
