"""The cell worker's `robo` returns what the Robot returns: the same records, fields and arrays.

An in-process `RuntimeServer` over a real LIBERO-PRO scene (conftest's
`runtime_server`): each read-only primitive is called directly on the
Robot in this process and from a cell in the confined worker; the cell
sees the same type (a `robots.results` record, or a numpy array of the same
dtype and shape) and the same values.  Arguments the cell passes as numpy
values arrive as plain numbers; a bad argument is the primitive's own error.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from robots.results import summarize


@pytest.fixture
def server(runtime_server):
    return runtime_server


def direct(server, name: str, *args):
    value = getattr(server.robot, name)(*args)
    server._drain()  # its recorder rows are not a cell's
    return value


def in_cell(server, expr: str) -> str:
    out = server.exec_cell(f"v = {expr}\nprint(type(v).__module__, type(v).__name__)\nprint(repr(v))")
    assert out.exception is None, out.text
    return out.text


@pytest.mark.parametrize("name,args", [("state", ()), ("locate", ("plate_1",)), ("camera_meta", ("agentview",)),
                                       ("locate", ("no_such_thing",))])
def test_records_arrive_with_their_type_and_values(server, name, args):
    if args == ("no_such_thing",):
        out = server.exec_cell("robo.locate('no_such_thing')")
        with pytest.raises(ValueError) as e:
            direct(server, "locate", "no_such_thing")
        assert out.exception == "ValueError" and str(e.value) in out.text
        return
    value = direct(server, name, *args)
    first, second = in_cell(server, f"robo.{name}(*{args!r})").splitlines()[:2]
    assert first == f"{type(value).__module__} {type(value).__name__}"
    assert second == repr(value)


@pytest.mark.parametrize("expr,name,args", [("robo.image('agentview')", "image", ("agentview",)),
                                            ("robo.depth('agentview')", "depth", ("agentview",)),
                                            ("robo.points('plate_1')", "points", ("plate_1",))])
def test_arrays_arrive_with_their_dtype_shape_and_bytes(server, expr, name, args):
    value = direct(server, name, *args)
    out = server.exec_cell(f"import hashlib\nv = {expr}\n"
                           "print(type(v).__name__, v.dtype, v.shape, hashlib.sha256(v.tobytes()).hexdigest())")
    assert out.text.strip() == (f"ndarray {value.dtype} {value.shape} "
                                f"{hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()}")


def test_a_record_holding_an_array_keeps_it(server):
    value = direct(server, "segment", "plate", "agentview")
    out = server.exec_cell("s = robo.segment('plate', 'agentview')\n"
                           "print(type(s).__name__, s.mask.dtype, s.mask.shape, int(s.mask.sum()), s.n_pixels)")
    assert out.text.strip() == (f"Segmented {value.mask.dtype} {value.mask.shape} {int(value.mask.sum())} "
                                f"{value.n_pixels}")


def test_numpy_arguments_arrive_as_plain_numbers_and_are_recorded_alike(server):
    here = direct(server, "state").eef_pos
    out = server.exec_cell(f"import numpy as np\nm = robo.move_to(np.array({list(here)}), max_steps=np.int64(3))\n"
                           "print(type(m).__name__)")
    assert out.exception is None and out.text.splitlines()[0] == "Move", out.text
    [row] = out.primitives
    assert row["name"] == "move_to" and row["args"] == {"xyz": summarize(list(here)), "max_steps": 3}
    out = server.exec_cell("robo.move_to(xyz=[0, 0, 1], speed=3)")
    assert out.exception == "ValueError" and "unexpected keyword argument 'speed'" in out.text
    assert out.primitives == []  # refused before the simulator saw it
