"""Per-role rollout settings (``selfplay.roles.<name>``), the review section (``selfplay.review``),
and the old flat keys, which still load under their new names with one note line."""

from __future__ import annotations

from pathlib import Path

import pytest

from evolora.config import (
    ConfigError,
    RoleSampling,
    SelfPlayConfig,
    apply_overrides,
    config_from_dict,
    dump_config,
    load_config,
    load_run_config,
)
from evolora.config.renamed import RENAMED, rename_keys
from evolora.generation.types import Sampling

ROOT = Path(__file__).resolve().parents[1]
OLD_RUN = ROOT / "docs" / "results" / "data" / "study-arith" / "population-s0"  # written with the flat keys

OLD_SELFPLAY = """\
selfplay:
  teacher_max_new_tokens: 24
  teacher_temperature: 0.7
  student_stop: ["\\n"]
  student_top_p: 0.9
  critic_samples: 4
  critic_std: false
"""


def _notes(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("note: old config keys")]


def test_new_keys_load_and_reach_the_rollout_settings(tmp_path, capsys):
    path = tmp_path / "new.yaml"
    path.write_text(
        "selfplay:\n  temperature: 0.9\n  roles:\n    teacher: {max_new_tokens: 24, temperature: 0.7}\n"
        '    student: {top_p: 0.8, stop: ["\\n"]}\n  review: {samples: 4, reviews: 6}\n'
    )
    selfplay = load_config(path).selfplay
    assert selfplay.sampling("teacher") == Sampling(max_new_tokens=24, temperature=0.7, top_p=1.0)
    assert selfplay.sampling("student") == Sampling(max_new_tokens=128, temperature=0.9, top_p=0.8, stop=("\n",))
    assert selfplay.sampling("student", stop=("?",)).stop == ("?",)  # the caller's stops replace the role's
    assert selfplay.sampling("critic") == Sampling(max_new_tokens=8, temperature=0.9, stop=("\n",))
    assert (selfplay.review.samples, selfplay.review.reviews, selfplay.review.std) == (4, 6, True)
    assert _notes(capsys) == []


def test_defaults_are_the_flat_keys_defaults():
    roles = SelfPlayConfig().roles
    assert list(roles) == ["teacher", "student", "critic"]
    assert [roles[r].max_new_tokens for r in roles] == [160, 128, 8]
    assert [roles[r].stop for r in roles] == [(), (), ("\n",)]
    assert all(roles[r].temperature is None and roles[r].top_p is None for r in roles)
    # a partial section keeps the role's other defaults, and the other roles
    roles = SelfPlayConfig(roles={"teacher": RoleSampling(temperature=0.5)}).roles
    assert (roles["teacher"].max_new_tokens, roles["teacher"].temperature, roles["critic"].max_new_tokens) == (
        160,
        0.5,
        8,
    )


def test_old_keys_load_under_their_new_names_with_one_line(tmp_path, capsys):
    path = tmp_path / "old.yaml"
    path.write_text(OLD_SELFPLAY)
    old = load_config(path, ["selfplay.critic_reviews=6"]).selfplay
    (line,) = _notes(capsys)  # one line for the file and the override together
    for key in ("selfplay.roles.teacher.{max_new_tokens,temperature}", "selfplay.roles.student.{stop,top_p}"):
        assert key in line
    assert "selfplay.review.{samples,std,reviews}" in line
    new = config_from_dict(
        {
            "selfplay": {
                "roles": {
                    "teacher": {"max_new_tokens": 24, "temperature": 0.7},
                    "student": {"stop": ["\n"], "top_p": 0.9},
                },
                "review": {"samples": 4, "std": False, "reviews": 6},
            }
        }
    ).selfplay
    assert old == new
    assert _notes(capsys) == []


def test_a_run_directory_written_with_the_flat_keys_still_loads(capsys):
    config = load_run_config(OLD_RUN)
    assert len(_notes(capsys)) == 1
    assert config.selfplay.sampling("teacher") == Sampling(max_new_tokens=24, temperature=0.7)
    assert config.selfplay.sampling("student") == Sampling(max_new_tokens=24, temperature=0.5, stop=("\n",))
    assert config.selfplay.review.samples == 1 and config.generation.engine == "eager"


@pytest.mark.parametrize(
    "selfplay, new",
    [
        (
            {"teacher_temperature": 0.5, "roles": {"teacher": {"temperature": 0.6}}},
            "selfplay.roles.teacher.temperature",
        ),
        ({"critic_std": False, "review": {"std": True}}, "selfplay.review.std"),
    ],
)
def test_an_old_key_with_its_new_key_is_an_error(selfplay, new):
    with pytest.raises(ConfigError, match=rf"\(the old name\) and {new} are both given; keep {new} only"):
        config_from_dict({"selfplay": selfplay})


def test_overrides_of_old_or_new_keys_win_over_the_file(tmp_path, capsys):
    path = tmp_path / "old.yaml"
    path.write_text(OLD_SELFPLAY)
    config = load_config(path, ["selfplay.roles.student.stop=[]", "selfplay.roles.critic.stop=[., '!']"])
    assert config.selfplay.roles["student"].stop == () and config.selfplay.roles["critic"].stop == (".", "!")
    assert len(_notes(capsys)) == 1
    new = tmp_path / "new.yaml"
    new.write_text(dump_config(load_config(path)))
    _notes(capsys)
    assert load_config(new, ["selfplay.teacher_temperature=0.3"]).selfplay.sampling("teacher").temperature == 0.3
    assert _notes(capsys) == [
        "note: old config keys read under their new names: selfplay.roles.teacher.temperature; write these"
    ]


def test_a_dumped_config_round_trips_without_a_note(tmp_path, capsys):
    config = load_config("arith_critic")
    path = tmp_path / "config.yaml"
    path.write_text(dump_config(config))
    assert load_config(path) == config
    assert _notes(capsys) == []


def test_a_role_of_ones_own_gets_its_settings():
    selfplay = config_from_dict(
        {"selfplay": {"temperature": 0.8, "roles": {"judge": {"max_new_tokens": 5, "top_p": 0.5, "stop": ["."]}}}}
    ).selfplay
    assert selfplay.sampling("judge") == Sampling(max_new_tokens=5, temperature=0.8, top_p=0.5, stop=(".",))
    assert selfplay.roles["teacher"].max_new_tokens == 160  # the built-in roles keep theirs
    assert SelfPlayConfig(roles={"judge": {}}).sampling("judge").max_new_tokens == 128
    with pytest.raises(ValueError, match=r"no rollout settings for role 'referee': add selfplay\.roles\.referee"):
        selfplay.sampling("referee")


@pytest.mark.parametrize(
    "roles, message",
    [
        ({"judge": {"temp": 0.5}}, "selfplay.roles.judge.temp: unknown key; selfplay.roles.judge takes temperature"),
        ({"student": {"max_new_tokens": 0}}, "selfplay.roles.student.max_new_tokens: Input should be greater"),
        ({"critic": {"stop": [""]}}, "selfplay.roles.critic.stop: an empty stop string"),
        ({"Judge": {}}, "selfplay.roles: role names are lower-case identifiers"),
        ({"teacher": None}, "selfplay.roles.teacher: Input should be a valid dictionary"),
    ],
)
def test_bad_role_sections_are_refused(roles, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        config_from_dict({"selfplay": {"roles": roles}})


def test_old_keys_in_the_python_api_name_their_new_place():
    with pytest.raises(ValueError, match=r"teacher_temperature is now roles\.teacher\.temperature"):
        SelfPlayConfig(teacher_temperature=0.5)


def test_every_old_key_has_a_new_place():
    assert len(RENAMED) == 16
    for old, new in RENAMED.items():
        data, renamed = rename_keys({"selfplay": {old: None}})
        assert renamed == [(f"selfplay.{old}", f"selfplay.{'.'.join(new)}")]
        node = data["selfplay"]
        for part in new:
            node = node[part]
        assert node is None
    assert apply_overrides({}, ["selfplay.critic_entropy=0.5"]) == {"selfplay": {"review": {"entropy": 0.5}}}
