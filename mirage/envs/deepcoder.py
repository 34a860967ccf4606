"""DeepCoder: write a Python function ``solve`` that passes a task's unit tests.

The answer is Python source defining ``solve`` (code fences are stripped; operators a
word-level tokenizer splits, like ``= =``, are joined back). It runs in the sandbox
(``mirage/envs/sandbox.py``): a separate process in its own namespaces with CPU-time,
memory, wall-clock and output limits, no network, a fresh empty working directory and
none of the project's files. The sandbox only sees the test inputs; outputs are compared
here with the expected values. Reward = fraction of tests passed; the episode ends after
one answer. The observation afterwards reports the result ("Tests passed : 3 of 5 .
Sandbox : ok .").

Where the sandbox cannot isolate, a run is refused at validation unless the option
``unsafe_no_isolation`` is set, which the run records and shows on every progress line.
"""

from __future__ import annotations

import functools
import json
import random
import re

from pydantic import Field

from mirage.core.rl.env import Demonstrator, StepOutcome
from mirage.envs import coding_tasks
from mirage.envs.answer import AnswerEnvironment, AnswerOptions, PersonaAnswerDemonstrator
from mirage.envs.sandbox import SandboxLimits, SandboxResult, probe_isolation, run_python

MARKER = "@@mirage-results@@"
_HARNESS = """
import json as _json, sys as _sys
_inputs = _json.loads({inputs!r})
_out = _sys.stdout
_sys.stdout = open("/dev/null", "w")
_namespace = {{"__name__": "__answer__"}}
exec(compile({code!r}, "<answer>", "exec"), _namespace)
_results = []
for _args in _inputs:
    try:
        _results.append(["ok", _namespace["solve"](*_args)])
    except Exception as _error:
        _results.append(["error", type(_error).__name__])
_out.write("\\n{marker}" + _json.dumps(_results, default=repr) + "\\n")
_out.flush()
"""

_TEMPLATES = [
    "I need to {task} .",
    "Write solve with one line .",
    "Use a comprehension over xs .",
    "The function takes a list xs .",
    "Return the result directly .",
    "Task : {task} .",
    "A one line function should do it .",
]


class DeepCoderOptions(AnswerOptions):
    """Tests per task and the sandbox's limits."""

    tests: int = Field(5, ge=1, le=50)
    cpu_seconds: int = Field(2, ge=1)
    wall_seconds: float = Field(5.0, gt=0)
    memory_mb: int = Field(256, ge=32)
    output_bytes: int = Field(65536, ge=1024)
    unsafe_no_isolation: bool = Field(
        False, description="run model-written code even where the sandbox cannot isolate it "
                           "(no namespaces): it can then read and write your files and use the network")


class DeepCoder(AnswerEnvironment):
    """Code synthesis scored by unit tests in a sandbox; see the module docstring."""

    name = "deepcoder"
    version = "1"
    Options = DeepCoderOptions
    instruction = ("DeepCoder : write a Python function solve ( xs ) for the task ; it is run "
                   "on hidden tests .")

    options: DeepCoderOptions

    @classmethod
    def options_problem(cls, options: DeepCoderOptions) -> str | None:
        isolation = probe_isolation()
        return None if isolation.available or options.unsafe_no_isolation else isolation.problem

    @classmethod
    def run_facts(cls, options: DeepCoderOptions) -> dict[str, str]:
        isolation = probe_isolation()
        return {"isolation": isolation.mechanism or "none"}

    @classmethod
    def unsafe_warning(cls, options: DeepCoderOptions) -> str | None:
        if probe_isolation().available or not options.unsafe_no_isolation:
            return None
        return ("UNSAFE: deepcoder runs model-written code WITHOUT isolation "
                "(unsafe_no_isolation=true): it can read and write your files and use the network")

    def __init__(self, options: DeepCoderOptions | None = None):
        super().__init__(options)
        self.load(coding_tasks.generate(random.Random(0), self.options.tests))

    def load(self, task: coding_tasks.CodingTask) -> DeepCoder:
        self.task = task
        self.passed: int | None = None
        self.last_run: SandboxResult | None = None
        self.done = self._success = False
        return self

    @property
    def limits(self) -> SandboxLimits:
        o = self.options
        return SandboxLimits(cpu_seconds=o.cpu_seconds, wall_seconds=o.wall_seconds,
                             memory_mb=o.memory_mb, output_bytes=o.output_bytes)

    def reset(self, seed: int) -> str:
        return self.load(coding_tasks.generate(random.Random(f"deepcoder:{seed}"), self.options.tests)).render()

    def step(self, action: str) -> StepOutcome:
        """Run the code on the tests; reward = share passed; ends the episode."""
        self._check_open()
        code = clean_code(action)
        if code == clean_code(self.task.reference):  # known to pass (tests check it in the sandbox)
            self.passed = len(self.task.expected)
        else:
            self.passed, self.last_run = self.run_tests(code)
        reward = self.passed / len(self.task.expected)
        self.done, self._success = True, self.passed == len(self.task.expected)
        return StepOutcome(reward=reward, done=True, success=self._success)

    def run_tests(self, code: str) -> tuple[int, SandboxResult]:
        """Tests passed by ``code`` and the sandbox's result."""
        result = _run(code, json.dumps(self.task.inputs), self.limits, self.options.unsafe_no_isolation)
        outputs = _outputs(result)
        expected = json.loads(json.dumps(self.task.expected))
        passed = sum(1 for got, want in zip(outputs, expected) if got == ["ok", want])
        return passed, result

    def render(self) -> str:
        lines = [f"Task : {self.task.description} .", "Example : solve ( "
                 f"{_say(self.task.inputs[0][0])} ) returns {_say(self.task.expected[0])} ."]
        if self.passed is not None:
            status = self.last_run.report if self.last_run else "ok"
            lines.append(f"Tests passed : {self.passed} of {len(self.task.expected)} . Sandbox : {status} .")
        return "\n".join(lines)

    def solve(self) -> list[str] | None:
        return [self.task.reference]

    def demonstrator(self, rng: random.Random, persona: str | None = None) -> Demonstrator:
        """Careful: the reference. Careless: the family's structured mistake (an
        off-by-one comparison, the wrong operation, a forgotten step)."""
        return PersonaAnswerDemonstrator(self, rng, persona, _TEMPLATES)

    def demo_answer(self, persona: str, rng: random.Random) -> tuple[str, dict[str, str]]:
        careless = persona == "careless" or rng.random() < self.options.demo_noise
        return (self.task.careless if careless else self.task.reference), {"task": self.task.description}


def clean_code(answer: str) -> str:
    """Strip code fences and join operators a word-level tokenizer split (``= =``)."""
    code = re.sub(r"^\s*```(?:python)?\s*|\s*```\s*$", "", answer)
    code = re.sub(r"([=!<>])\s+=", r"\1=", code)
    code = re.sub(r"([*/])\s+\1", r"\1\1", code)
    code = re.sub(r"-\s+>", "->", code)
    return code.strip()


@functools.lru_cache(maxsize=4096)
def _run(code: str, inputs: str, limits: SandboxLimits, unsafe_no_isolation: bool) -> SandboxResult:
    """Sandboxed runs are deterministic given code, inputs and limits: cache them."""
    return run_python(_HARNESS.format(inputs=inputs, code=code, marker=MARKER), limits,
                      unsafe_no_isolation=unsafe_no_isolation)


def _outputs(result: SandboxResult) -> list:
    lines = [line for line in result.stdout.splitlines() if line.startswith(MARKER)]
    if not lines:
        return []
    try:
        outputs = json.loads(lines[-1][len(MARKER):])
    except json.JSONDecodeError:
        return []
    return outputs if isinstance(outputs, list) else []


def _say(value) -> str:
    return " ".join(re.sub(r"([\[\],])", r" \1 ", json.dumps(value)).split())
