"""Task families: deterministic generation, reference answers verify, wrong and gamed ones fail,
and the sandbox enforces its limits."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.ide import (
    CLIENT_TYPES,
    FAMILIES,
    MIX,
    Task,
    client_profile,
    prompt_hash,
    sample_tasks,
    task_from_id,
    verify_reply,
)
from tasks.ide.drawing import FILE_KINDS, WORDS
from tasks.ide.mix import check_mix
from tasks.ide.task import (
    HELDOUT_SEED_START,
    TaskIdError,
    content_split,
    extract_answer,
    fence,
)
from tasks.ide.verify import SandboxLimits, run_python, static_guard

ROOT = Path(__file__).resolve().parents[3]
CODE_RUNNING = {"complete_function", "fix_assertion", "write_test"}
FAST = SandboxLimits(wall_s=3.0, cpu_s=1)


def _seeds(name: str) -> list[int]:
    return [3, 11, HELDOUT_SEED_START + 5] if name in CODE_RUNNING else [0, 1, 2, 7, 42, 99]


def _as_reply(task: Task, text: str) -> str:
    return fence(text) if task.answer_format == "code" else text


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_generation_is_deterministic_and_split_by_seed(name: str) -> None:
    family = FAMILIES[name]
    for seed in (5, HELDOUT_SEED_START + 5):
        first, second = family.generate(seed), family.generate(seed)
        assert first == second
        assert first.task_id == f"{name}:{seed}" and task_from_id(first.task_id) == first
        assert first.split == ("train" if seed < HELDOUT_SEED_START else "heldout")
    train = {family.generate(s).context for s in range(20)}
    heldout = {family.generate(HELDOUT_SEED_START + s).context for s in range(20)}
    assert not train & heldout
    assert len(train) >= 10  # seeds give varied tasks


def test_generation_is_deterministic_across_processes() -> None:
    ids = [f"{name}:{seed}" for name in sorted(FAMILIES) for seed in (1, HELDOUT_SEED_START)]
    code = (
        "import json, sys\nfrom tasks.ide import task_from_id\n"
        "print(json.dumps([task_from_id(i).reference for i in sys.argv[1:]]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *ids], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == [task_from_id(i).reference for i in ids]


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_reference_passes_and_wrong_answer_fails(name: str) -> None:
    for seed in _seeds(name):
        task = FAMILIES[name].generate(seed)
        verdict = verify_reply(task, task.reference_reply)
        assert verdict.passed, (task.task_id, verdict.feedback)
        wrong = verify_reply(task, task.wrong_reply)
        assert not wrong.passed, task.task_id
        assert wrong.feedback


def _generic_gamed(task: Task) -> list[str]:
    """Trivial answers no family may accept: empty, echo of the prompt, a stub."""
    return [
        "",
        "   \n",
        task.context,
        fence(task.context),
        task.instruction,
        fence("pass"),
        task.user_prompt(),
        "I cannot help with that.",
    ]


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_trivial_and_echo_answers_fail(name: str) -> None:
    task = FAMILIES[name].generate(_seeds(name)[0])
    for reply in _generic_gamed(task):
        assert not verify_reply(task, reply).passed, (name, reply[:60])


def test_code_answers_need_a_fence() -> None:
    task = FAMILIES["rename_symbol"].generate(1)
    verdict = verify_reply(task, task.reference)  # right code, but no fence
    assert not verdict.passed and "fenced" in verdict.feedback


def test_line_answers_are_normalized() -> None:
    task = FAMILIES["function_name"].generate(1)
    for reply in (task.reference, f" `{task.reference}` \n", f"```\n{task.reference}\n```"):
        assert verify_reply(task, reply).passed, reply
    assert not verify_reply(task, f"def {task.reference}").passed


def test_rename_rejects_partial_and_extra_changes() -> None:
    task = FAMILIES["rename_symbol"].generate(4)
    old = task.symbol.split("->")[0]
    partial = verify_reply(task, task.wrong_reply)
    assert not partial.passed and f"`{old}` is still used" in partial.feedback
    extra = task.reference.rstrip() + "\n    return None\n"
    assert not verify_reply(task, fence(extra)).passed
    assert verify_reply(task, fence("    " + task.reference.replace("\n", "\n    "))).passed


def test_loop_to_comprehension_gives_structural_feedback() -> None:
    task = FAMILIES["loop_to_comprehension"].generate(2)
    name = task.symbol
    assert not verify_reply(task, fence(f"{name} = list(items)")).passed
    spaced = task.reference.replace("[", "[ ").replace(" for ", "  for ")
    assert verify_reply(task, fence(spaced)).passed  # compared by AST, not by text


def test_eval_expression_rejects_code_for_output() -> None:
    task = FAMILIES["eval_expression"].generate(9)
    verdict = verify_reply(task, task.context)
    assert not verdict.passed and "printed output" in verdict.feedback


@pytest.mark.parametrize("name", ["expression_type", "return_type", "exception_type"])
def test_quick_question_families_read_the_name_leniently_and_reject_others(name: str) -> None:
    task = FAMILIES[name].generate(3)
    assert verify_reply(task, f"`{task.reference}`").passed
    assert verify_reply(task, f"builtins.{task.reference}").passed
    assert verify_reply(task, f"<class '{task.reference}'>").passed
    wrong = verify_reply(task, task.wrong)
    assert not wrong.passed and "outermost" in wrong.feedback
    prose = verify_reply(task, "it is probably an error of some kind")
    assert not prose.passed and task.wrong in prose.feedback


def test_quick_question_references_come_from_running_the_code() -> None:
    for seed in range(40):
        hover = FAMILIES["expression_type"].generate(seed)
        _name, expression = hover.context.split(" = ", 1)
        assert type(eval(expression)).__name__ == hover.reference, hover.context
        failing = FAMILIES["exception_type"].generate(seed)
        with pytest.raises(Exception) as raised:  # any class: its name is checked
            exec(failing.context, {})
        assert type(raised.value).__name__ == failing.reference, failing.context


def test_return_type_shows_a_whole_function_that_ends_in_the_returned_expression() -> None:
    for seed in range(40):
        task = FAMILIES["return_type"].generate(seed)
        function = ast.parse(task.context).body[0]
        assert isinstance(function, ast.FunctionDef)
        assert 4 <= len(task.context.splitlines()) <= 12, task.context
        last = function.body[-1]
        assert isinstance(last, ast.Return) and last.value is not None
        returned = eval(ast.unparse(last.value))
        assert type(returned).__name__ == task.reference, task.context
        # the rest of the body says nothing about the type: no other return, no assignment of
        # a value of the hover shapes before it
        assert not any(isinstance(n, ast.Return) for n in function.body[:-1])


def test_the_mix_has_families_on_both_sides_of_the_tiny_model() -> None:
    learnable = {n for n, f in FAMILIES.items() if f.learnable}
    assert learnable == {"expression_type", "return_type", "exception_type"}
    assert 0 < sum(MIX[n] for n in learnable) < 1


def _first_case_constant(task: Task) -> str:
    """A function that returns the first hidden case's expected value, whatever the input."""
    tree = ast.parse(task.tests)
    cases = next(
        n.value
        for n in tree.body
        if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "CASES"
    )
    _args, expected, _call = ast.literal_eval(cases)[0]
    return f"def {task.symbol}(*args):\n    return {expected!r}\n"


@pytest.mark.parametrize("name", ["complete_function", "fix_assertion"])
def test_function_answers_cannot_game_hidden_tests(name: str) -> None:
    task = FAMILIES[name].generate(21)
    fn = task.symbol
    gamed = [
        f"def {fn}(*args):\n    pass\n",
        _first_case_constant(task),  # hard-codes one expected value
        "import os\nos._exit(0)\n",
        f"import sys\ndef {fn}(*a):\n    sys.exit(0)\n",
        f"raise SystemExit(0)\ndef {fn}(*a):\n    return 0\n",
        f"def {fn}(*a):\n    return open('main.py').read()\n",
        task.context if name == "fix_assertion" else task.context + "    return None\n",
    ]
    for code in gamed:
        verdict = verify_reply(task, fence(code))
        assert not verdict.passed, code
    assert "must define" in verify_reply(task, fence("def other():\n    return 1\n")).feedback


def test_write_test_rejects_vacuous_and_hacked_tests() -> None:
    task = FAMILIES["write_test"].generate(8)
    module, fn = task.symbol.split(".")
    call = task.reference.split("assert ")[1].split(" == ")[0]
    gamed = {
        "empty": "def test_it():\n    pass\n",
        "assert True": "def test_it():\n    assert True\n    assert True\n",
        "tautology": f"def test_it():\n    assert {call} == {call}\n    assert {call} != 0.5\n",
        "exit early": "import sys\ndef test_it():\n    sys.exit(0)\n",
        "source check": (
            f"import inspect\ndef test_it():\n    assert inspect.getsource({fn})\n    assert 1\n"
        ),
        "reads files": f"def test_it():\n    assert 'def' in open('{module}.py').read()\n",
        "dunder": f"def test_it():\n    assert {fn}.__code__\n    assert {call}\n",
        "no test function": f"assert {call} == {call}\n",
        "fails on reference": task.wrong,
    }
    for label, code in gamed.items():
        verdict = verify_reply(task, fence(code))
        assert not verdict.passed, label
    weak = verify_reply(task, fence(f"def test_it():\n    assert {call} == {call}\n    assert 1\n"))
    assert "still passes when the function has these bugs" in weak.feedback


def test_static_guard() -> None:
    assert static_guard("import math\ndef f(x):\n    return math.floor(x)\n") is None
    assert static_guard("if __name__ == '__main__':\n    pass\n") is None
    for code in (
        "import os",
        "from subprocess import run",
        "x = open('f')",
        "x = eval('1')",
        "x = (1).__class__",
        "__import__('os')",
        "getattr(int, 'real')",
    ):
        assert static_guard(code) is not None, code
    assert "syntax error" in (static_guard("def (") or "")
    assert static_guard("import mymod", extra_imports=("mymod",)) is None


def test_sandbox_runs_code_and_captures_output() -> None:
    result = run_python("from helper import X\nprint(X * 2)\n", files={"helper.py": "X = 21\n"})
    assert result.completed and result.stdout == "42"


def test_sandbox_kills_infinite_loop() -> None:
    result = run_python("while True:\n    pass\n", limits=FAST)
    assert not result.completed and result.returncode != 0
    assert "did not finish" in result.failure_text() or "signal" in result.failure_text()


def test_sandbox_kills_sleeping_code_by_wall_clock() -> None:
    result = run_python("import time\ntime.sleep(60)\n", limits=SandboxLimits(wall_s=1.0))
    assert result.timed_out and not result.completed


def test_sandbox_refuses_huge_allocation() -> None:
    result = run_python("x = bytearray(8 * 1024 ** 3)\nprint('allocated')\n", limits=FAST)
    assert not result.completed and "MemoryError" in result.stderr


def test_sandbox_refuses_writes_outside_its_directory(tmp_path: Path) -> None:
    outside = tmp_path / "escaped.txt"
    result = run_python(f"open({str(outside)!r}, 'w').write('x')\n", limits=FAST)
    assert not result.completed and "PermissionError" in result.stderr
    assert not outside.exists()
    inside = run_python("open('ok.txt', 'w').write('x')\nprint(open('ok.txt').read())\n")
    assert inside.completed and inside.stdout == "x"
    removal = run_python(f"import os\nos.remove({str(outside)!r})\n", limits=FAST)
    assert "PermissionError" in removal.stderr


def test_sandbox_limits_file_size_network_and_processes() -> None:
    big = run_python("open('big.txt', 'w').write('x' * 10 ** 7)\n", limits=FAST)
    assert not big.completed and "File too large" in big.stderr
    net = run_python("import socket\nsocket.create_connection(('127.0.0.1', 9))\n", limits=FAST)
    assert not net.completed and "not allowed" in net.stderr
    sub = run_python("import subprocess\nsubprocess.run(['true'])\n", limits=FAST)
    assert not sub.completed and "subprocess.Popen is not allowed" in sub.stderr


def test_sandbox_early_exit_does_not_count_as_success() -> None:
    for code in ("import sys\nsys.exit(0)\n", "import os\nos._exit(0)\n"):
        result = run_python(code, limits=FAST)
        assert result.returncode == 0 and not result.completed


def test_extract_answer_rules() -> None:
    assert extract_answer("```python\nx = 1\n```", "code") == "x = 1\n"
    assert extract_answer("Sure:\n```\ny = 2\n```\nDone", "code") == "y = 2\n"
    assert extract_answer("x = 1", "code") is None
    assert extract_answer("\n  'abc'  \nmore", "line") == "abc"
    assert extract_answer("", "line") is None


def test_task_ids_stay_on_the_client_side() -> None:
    task = FAMILIES["eval_expression"].generate(12)
    assert task_from_id(task.task_id) == task
    assert task.labels() == {"family": "eval_expression", "task_id": task.task_id, "split": "train"}
    for bad in ("nope", "eval_expression:x", "unknown_family:3", "eval_expression:9999999999"):
        with pytest.raises(TaskIdError):
            task_from_id(bad)
    for client in CLIENT_TYPES:
        text = json.dumps(task.messages(client))
        assert task.task_id not in text and "# task:" not in text and task.family not in text


def test_all_families_share_one_system_prompt_per_client_type() -> None:
    tasks = [FAMILIES[name].generate(seed) for name in sorted(FAMILIES) for seed in (4, 9)]
    prompts = {}
    for client in CLIENT_TYPES:
        messages = [task.messages(client) for task in tasks]
        assert all([m["role"] for m in ms] == ["system", "user"] for ms in messages)
        systems = {ms[0]["content"] for ms in messages}
        assert systems == {client_profile(client).system_prompt}
        assert [ms[1]["content"] for ms in messages] == [t.user_prompt() for t in tasks]
        prompts[client] = systems.pop()
    assert prompts["ide_chat"] != prompts["agent"]
    assert client_profile("ide_chat").tools == ()
    tools = [tool["function"] for tool in client_profile("agent").tools]
    names = [tool["name"] for tool in tools]
    assert names == ["read_file", "list_dir", "search", "apply_patch", "run_tests"]
    assert all(tool["parameters"]["type"] == "object" for tool in tools)
    with pytest.raises(ValueError, match="ide_chat"):
        client_profile("vim")


def test_the_user_message_asks_for_the_answer_format() -> None:
    for name in sorted(FAMILIES):
        task = FAMILIES[name].generate(6)
        last = task.user_prompt().splitlines()[-1]
        if task.answer_format == "code":
            assert "code block" in last, name
        else:
            assert "Reply with just" in last and "code block" not in last, name


def test_file_names_do_not_tell_synthetic_families_apart() -> None:
    # Stdlib families show the real file; write_test names the module its test imports.
    own_names = {"function_name", "rename_symbol", "write_test"}
    shared = {f"{w}_{k}.py" for w in WORDS for k in FILE_KINDS}
    for name in sorted(set(FAMILIES) - own_names):
        assert {FAMILIES[name].generate(seed).filename for seed in range(8)} <= shared, name


def test_prompt_hash_is_of_the_canonical_user_text() -> None:
    text = FAMILIES["trace_output"].generate(3).user_prompt()
    assert prompt_hash(text) == prompt_hash(f"\n  {text.replace(chr(10), chr(13) + chr(10))}  ")
    assert len(prompt_hash(text)) == 64 and prompt_hash(text) != prompt_hash(text + ".")


def test_mix_is_fixed_reproducible_and_split() -> None:
    check_mix(MIX)
    assert set(MIX) == set(FAMILIES)
    tasks = sample_tasks(60, seed=4)
    assert [t.task_id for t in tasks] == [t.task_id for t in sample_tasks(60, seed=4)]
    assert all(t.split == "train" for t in tasks)
    assert len({t.family for t in tasks}) >= 6
    held = sample_tasks(20, seed=4, split="heldout")
    assert all(t.seed >= HELDOUT_SEED_START and t.split == "heldout" for t in held)
    assert all(content_split(t.context) == "heldout" for t in held)
    with pytest.raises(ValueError, match="sum to 1"):
        check_mix({"eval_expression": 0.5})
