"""Three thousand hostile files per format (``tests/fuzz.py``): every reader a check runs before a framework
sees the model returns or refuses in one line; never another exception, a hang or a file written outside
its folder. The counts are printed; ``python tests/fuzz.py --cases 100000`` is the longer run."""
import pytest

import fuzz

CASES = 3_000


@pytest.mark.parametrize("name", list(fuzz.FORMATS))
def test_hostile_files_are_read_or_refused_in_one_line(name, capsys):
    n = CASES
    o = fuzz.run_format(name, n)
    with capsys.disabled():
        print(f"\n  fuzz {name}: {o.cases} cases in {o.seconds:.1f} s: {o.read} read, {o.refused} refused in one line, "
              f"{o.crashed} native crashes (contained by the isolated loader), {len(o.failures)} failures")
    assert o.cases == n
    assert not o.failures, o.failures[:10]
    assert o.read > 0 and o.refused > 0  # the mutations reach both the readers' success and their refusals
