"""Help for people: examples that really parse, a reference that matches the code, completion, help COMMAND."""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentstream.cli import COMMANDS, main
from agentstream.cli._help import EXAMPLES, build_parser, reference_markdown
from agentstream.cli.completion_cmd import command_completions, completion_script

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _agentstream_argv(example: str, name: str) -> list[str]:
    """The words of ``agentstream NAME …`` in an example shell line (pipes and redirections cut off)."""
    words = shlex.split(example, posix=True)
    for index, word in enumerate(words[:-1]):
        if word == "agentstream" and words[index + 1] == name:
            rest = words[index + 1 :]
            break
    else:
        raise AssertionError(f"no 'agentstream {name}' in {example!r}")
    for stop, word in enumerate(rest):
        if word in ("|", ">", "<", ">>") or word.startswith((">", "<")):
            return rest[:stop]
    return rest


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_has_examples_that_parse(name: str) -> None:
    examples = EXAMPLES.get(name, ())
    assert 1 <= len(examples) <= 3, f"{name}: give one to three examples"
    parser = build_parser(name)
    for example in examples:
        argv = _agentstream_argv(example, name)
        parser.parse_args(argv[1:])  # SystemExit (a failed test) if an example uses a wrong option


def test_help_ends_with_the_examples(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["help", "convert"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith(EXAMPLES["convert"][-1])
    assert "usage: agentstream convert" in out


def test_help_of_an_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["help", "covnert"]) == 2
    assert "did you mean 'convert'" in capsys.readouterr().err


def test_version_names_the_protocol(capsys: pytest.CaptureFixture[str]) -> None:
    from agentstream import PROTOCOL_VERSION, __version__

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"agentstream {__version__} (protocol v{PROTOCOL_VERSION})\n"


def test_docs_cli_md_is_generated_from_the_parsers() -> None:
    written = (DOCS / "cli.md").read_text(encoding="utf-8")
    assert written == reference_markdown(), (
        "docs/cli.md is out of date: regenerate it with "
        "python -c 'from agentstream.cli._help import reference_markdown as r; print(r(), end=\"\")' > docs/cli.md"
    )


def test_bash_completion_is_valid_bash_and_completes_options(tmp_path: Path) -> None:
    bash = shutil.which("bash")
    assert bash, "bash is needed for this test"
    script = tmp_path / "agentstream.bash"
    script.write_text(completion_script("bash"))
    probe = (
        f"source {script}; COMP_WORDS=(agentstream convert --t); COMP_CWORD=2; _agentstream; "
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    out = subprocess.run([bash, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["--to"]
    probe = (
        f'source {script}; COMP_WORDS=(agentstream fol); COMP_CWORD=1; _agentstream; echo "${{COMPREPLY[@]}}"'
    )
    assert subprocess.run([bash, "-c", probe], capture_output=True, text=True, check=True).stdout.split() == [
        "follow"
    ]


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_other_shells_get_a_script_naming_every_command(shell: str) -> None:
    script = completion_script(shell)
    for name in COMMANDS:
        assert name in script


def test_completion_command_prints_the_script() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "agentstream", "completion", "bash"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out == completion_script("bash")


def _bash_complete(script: Path, *words: str) -> list[str]:
    """What the bash script offers for ``words`` (the last is the word being completed), run in a real bash."""
    bash = shutil.which("bash")
    assert bash, "bash is needed for this test"
    probe = f'source {script}; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _agentstream; printf "%s\\n" "${{COMPREPLY[@]}}"'
    done = subprocess.run([bash, "-c", probe, "_", *words], capture_output=True, text=True, check=True)
    return done.stdout.split()


def test_bash_completion_offers_the_choices_of_positionals_and_options(tmp_path: Path) -> None:
    script = tmp_path / "agentstream.bash"
    script.write_text(completion_script("bash"))
    assert _bash_complete(script, "agentstream", "completion", "") == ["bash", "zsh", "fish"]
    assert _bash_complete(script, "agentstream", "export", "") == ["otel"]
    assert _bash_complete(script, "agentstream", "export", "--endpoint", "http://h:1", "o") == ["otel"]
    (tmp_path / "run.ndjson").write_text("")
    assert _bash_complete(script, "agentstream", "export", "otel", str(tmp_path / "r")) == [
        str(tmp_path / "run.ndjson")
    ]  # after the target, FILE
    from agentstream.dialects import dialect_names

    assert _bash_complete(script, "agentstream", "convert", "--to", "") == list(dialect_names())
    assert _bash_complete(script, "agentstream", "convert", "--to", "=", "ge") == ["gemini", "gemini-log"]
    assert _bash_complete(script, "agentstream", "view", "--from", "au") == ["auto"]


@pytest.mark.parametrize("name", list(COMMANDS))
def test_completion_offers_every_choice_argparse_knows(name: str, tmp_path: Path) -> None:
    script = tmp_path / "agentstream.bash"
    script.write_text(completion_script("bash"))
    fish = completion_script("fish")
    for action in build_parser(name)._actions:
        if action.choices is None:
            continue
        choices = [str(choice) for choice in action.choices]
        if action.option_strings:
            for flag in action.option_strings:
                assert _bash_complete(script, "agentstream", name, flag, "") == choices, flag
            assert f"-x -a '{' '.join(choices)}'" in fish
        else:
            assert _bash_complete(script, "agentstream", name, "") == choices
            assert f"-a '{' '.join(choices)}'" in fish
    assert command_completions(build_parser(name)).flags == sorted(
        flag for action in build_parser(name)._actions for flag in action.option_strings
    )


@pytest.mark.parametrize("name", list(COMMANDS))
def test_options_may_come_before_a_positional_that_follows_another(name: str) -> None:
    """argparse takes every positional at the first one, an optional one as its default; a later one is then refused."""
    parser = build_parser(name)
    positionals = [a for a in parser._actions if not a.option_strings]
    later_optional = any(a.nargs in ("?", "*") for a in positionals[1:])
    if later_optional:
        assert parser.parse_args.__func__ is argparse.ArgumentParser.parse_intermixed_args  # type: ignore[attr-defined]
