"""The built wheel, installed alone in a fresh virtualenv (with one extra at most), imports and runs its examples.

What the repository's own virtualenv cannot show: that the wheel declares
every package it imports. Each test installs ``toolsched`` or
``toolsched[EXTRA]`` from the wheel with pip, then runs, offline, the smallest
example of what that extra is for (scripted or recorded model answers, local
servers). pip needs the package index, or a cache that holds the packages.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from wheel_venvs import EXAMPLES, REPOSITORY, Venv, clean_environment

PROVIDER_ANSWER = "Paris is 18°C and London is 59°F. (2 requests, results sent: True)"


@pytest.mark.installs("")
def test_the_wheel_alone_imports_every_module_and_runs_the_quickstart(venv: Venv) -> None:
    *failures, streamed = venv.check("core").splitlines()
    assert streamed == "streamed: RunFinished hi"
    # Only the framework integrations need more than the core, and they say which extra.
    assert [line.split(": ", 1)[0] for line in failures] == [
        "toolsched.integrations.agents",
        "toolsched.integrations.langchain",
        "toolsched.integrations.langgraph",
    ], failures
    assert "pip install 'toolsched[agents]'" in failures[0]
    assert "pip install 'toolsched[langgraph]'" in failures[1]
    assert "pip install 'toolsched[langgraph]'" in failures[2]
    lines = venv.run(EXAMPLES / "quickstart.py").splitlines()
    assert lines[0] == "c1 read_file batch=0 'first 100 lines of a.py'"
    assert lines[1].startswith("c2 grep batch=0 [")
    assert lines[2] == "c3 write_file batch=1 'wrote 7 characters to b.py'"
    assert lines[3].startswith("c4 read_file batch=None error (invalid_input)")


def readme_examples() -> list[tuple[str, str]]:
    """README.md's ```python blocks, each with the ```output block that follows it (the text it prints)."""
    text = (REPOSITORY / "README.md").read_text(encoding="utf-8")
    found = re.findall(r"^```python\n(.*?)^```\n\n```output\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)
    assert len(found) == len(re.findall(r"^```python$", text, flags=re.MULTILINE)), "a README block prints nothing"
    return found


@pytest.mark.installs("")
def test_the_wheel_alone_runs_the_readmes_first_example_as_written(venv: Venv, tmp_path: Path) -> None:
    code, output = readme_examples()[0]
    script = tmp_path / "readme_example.py"
    script.write_text(code, encoding="utf-8")
    assert venv.run(script).splitlines() == output.splitlines()


@pytest.mark.installs("anthropic")
def test_the_anthropic_extra_runs_the_readmes_provider_example_as_written(venv: Venv, tmp_path: Path) -> None:
    code, output = readme_examples()[1]
    assert "from anthropic import" in code
    script = tmp_path / "readme_provider_example.py"
    script.write_text(code, encoding="utf-8")
    assert venv.run(script).splitlines() == output.splitlines()


def toolsched_command(venv: Venv, *arguments: str | Path) -> subprocess.CompletedProcess[str]:
    """The wheel's ``toolsched`` console script (its entry point in the virtualenv's bin/), run outside the repo."""
    return subprocess.run(
        [venv.root / "bin" / "toolsched", *arguments],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=venv.root.parent,
        env=clean_environment(),
    )


@pytest.mark.installs("")
def test_the_wheels_command_line_runs_each_subcommand(venv: Venv) -> None:
    shown = toolsched_command(venv, "--help")
    assert shown.returncode == 0 and "{demo,bench}" in shown.stdout, shown.stderr
    version = venv.run("-c", "import importlib.metadata as m; print(m.version('toolsched'))").strip()
    assert toolsched_command(venv, "--version").stdout.strip() == f"toolsched {version}"
    for subcommand in ("demo", "bench"):
        assert toolsched_command(venv, subcommand, "--help").returncode == 0
    demo = toolsched_command(venv, "demo")
    assert demo.returncode == 0, demo.stderr
    assert "c8 deploy" in demo.stdout and "unknown_tool" in demo.stdout
    bench = toolsched_command(venv, "bench", "--calls", "3", "--turns", "1", "--json")
    assert bench.returncode == 0, bench.stderr
    report = json.loads(bench.stdout)
    assert report["workload"]["calls_per_turn"] == 3
    assert len(report["strategies"]) == 5 and report["strategies"][0]["strategy"] == "Sequential()"
    # Without the plot extra, --plot is refused with the extra to install, not a traceback.
    plotted = toolsched_command(venv, "bench", "--calls", "3", "--turns", "1", "--plot", "bench.png")
    assert plotted.returncode == 2 and "pip install 'toolsched[plot]'" in plotted.stderr, plotted.stderr


@pytest.mark.installs("")
def test_the_wheel_runs_as_python_m_toolsched_and_ships_its_types(venv: Venv, tmp_path: Path) -> None:
    """``python -m toolsched`` is the command line; the wheel holds ``py.typed`` and the engine's stubs, so that
    a type checker reads toolsched's own annotations: the README's first example is clean under mypy --strict
    against the installed wheel (without them, mypy refuses the import)."""
    shown = venv.run("-m", "toolsched", "--help")
    assert shown.startswith("usage: toolsched ") and "{demo,bench}" in shown
    shipped = "from importlib.resources import files; print(*(files('toolsched').joinpath(n).is_file() for n in {!r}))"
    assert venv.run("-c", shipped.format(("py.typed", "_core.pyi"))).split() == ["True", "True"]
    code, _ = readme_examples()[0]
    script = tmp_path / "readme_example.py"
    script.write_text(code, encoding="utf-8")
    mypy = [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--python-executable", venv.python, script]
    env = {**clean_environment(), "MYPY_CACHE_DIR": str(tmp_path / "mypy_cache")}
    checked = subprocess.run(mypy, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.installs("plot")
def test_plot_extra(venv: Venv, tmp_path: Path) -> None:
    chart = tmp_path / "bench.png"
    plotted = toolsched_command(venv, "bench", "--calls", "3", "--turns", "1", "--plot", chart)
    assert plotted.returncode == 0, plotted.stderr
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.installs("anthropic")
def test_anthropic_extra(venv: Venv) -> None:
    assert venv.check("providers", "anthropic_tools:anthropic").splitlines() == [
        f"anthropic_tools.main: {PROVIDER_ANSWER}",
        f"anthropic_tools.main_with_loop: {PROVIDER_ANSWER}",
    ]


@pytest.mark.installs("openai")
def test_openai_extra(venv: Venv) -> None:
    lines = venv.check("providers", "openai_chat_tools:openai_chat", "openai_responses_tools:openai_responses")
    assert lines.splitlines() == [
        f"openai_chat_tools.main: {PROVIDER_ANSWER}",
        f"openai_chat_tools.main_with_loop: {PROVIDER_ANSWER}",
        f"openai_responses_tools.main: {PROVIDER_ANSWER}",
        f"openai_responses_tools.main_with_loop: {PROVIDER_ANSWER}",
    ]


@pytest.mark.installs("gemini")
def test_gemini_extra(venv: Venv) -> None:
    assert venv.check("providers", "gemini_tools:gemini").splitlines() == [
        f"gemini_tools.main: {PROVIDER_ANSWER}",
        f"gemini_tools.main_with_loop: {PROVIDER_ANSWER}",
    ]


@pytest.mark.installs("mcp")
def test_mcp_extra(venv: Venv) -> None:
    assert venv.check("mcp").splitlines() == ["stdio: add -> 42", "http: add -> 42"]


@pytest.mark.installs("langgraph")
def test_langgraph_extra(venv: Venv) -> None:
    lines = venv.check("langgraph").splitlines()
    assert lines[0] == "answer: Paris is 18°C; noted."
    assert lines[1] == "c1 success: Paris: 18°C"
    assert lines[2].startswith("c2 error: ") and "denied by the rule `save_note(/etc/**)`" in lines[2]
    assert lines[3:] == ["c3 success: saved to weather", "notes: ['weather/Paris 18']"]


@pytest.mark.installs("agents")
def test_agents_extra(venv: Venv) -> None:
    lines = venv.check("agents").splitlines()
    assert lines[0] == "answer: Paris is 18°C; noted."
    assert lines[1] == "c1: Paris: 18°C"
    assert lines[2].startswith("c2: ") and "denied by the rule `save_note(/etc/**)`" in lines[2]
    assert lines[3:] == ["c3: saved to weather", "notes: ['weather/Paris 18']"]


@pytest.mark.installs("otel")
def test_otel_extra(venv: Venv) -> None:
    # The extra is the API: enough for the integration, whose spans go nowhere until an SDK is installed.
    assert venv.check("otel").splitlines() == ["c1 ok contents of a.txt", "c2 unknown_tool None"]
    # The example exports with the SDK, as an application does.
    venv.pip_install("opentelemetry-sdk>=1.30,<2")
    assert venv.run(EXAMPLES / "otel_tracing.py").splitlines() == [
        "agent turn",
        "  execute_tool delete_file id=c4 error.type=unknown_tool",
        "  toolsched.batch",
        "    execute_tool read_file id=c1",
        "    execute_tool read_file id=c2",
        "  toolsched.batch",
        "    execute_tool write_file id=c3",
        "toolsched.tool.calls delete_file unknown_tool: 1",
        "toolsched.tool.calls read_file ok: 2",
        "toolsched.tool.calls write_file ok: 1",
    ]


@pytest.mark.installs("ray")
def test_ray_extra(venv: Venv) -> None:
    # The example starts a two-CPU cluster on this machine: loopback only, no usage reporting, no token file.
    env = {**clean_environment(), "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    lines = venv.run(EXAMPLES / "ray_scale_out.py", timeout=180, env=env).splitlines()
    assert lines[0].startswith("c1 checksum ok ") and lines[0].endswith(" (on a Ray worker)")
    assert lines[1] == "c2 word_count ok 4 words (here)"
    assert lines[2] == "c3 glossary ok a framework for distributed Python (lookup 1 on this worker, on a Ray worker)"
    assert lines[3] == "c4 glossary ok a stateful Ray worker (lookup 2 on this worker, on a Ray worker)"
    assert lines[4] == "c5 checksum invalid_input invalid arguments for `checksum`:"


@pytest.mark.installs("postgres")
def test_postgres_extra(venv: Venv) -> None:
    dsn = os.environ.get("TOOLSCHED_TEST_POSTGRES_DSN")
    if not dsn:
        pytest.fail(
            "TOOLSCHED_TEST_POSTGRES_DSN is not set: run the tests through `make test`, which starts PostgreSQL"
        )
    assert venv.check("postgres", dsn).splitlines() == ["turn-1 ['hello']", "recovered ['hello']"]
