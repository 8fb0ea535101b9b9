"""The ``upscale`` section: strict validation at load time (unknown keys, ranges, the target's
combinations, the aspect ratio's forms) and the pre-flight check of the upscaler
(:func:`image_project.preflight.check_upscale`), both before any model call."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from image_project.artifacts.upscale import BINARY_ENV_VAR, UpscaleTarget
from image_project.config.loading import load_config
from image_project.config.models import AppConfig
from image_project.errors import ConfigError, InputFileError
from image_project.preflight import check_outputs, check_upscale

REPO = Path(__file__).resolve().parents[1]


def cfg(tmp_path: Path, *overrides: str) -> AppConfig:
    return load_config(
        root=REPO,
        env={},
        overrides=[
            f"image.generation_path={tmp_path / 'images'}",
            f"image.log_path={tmp_path / 'logs'}",
            *overrides,
        ],
    )


def config_error(tmp_path: Path, *overrides: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        cfg(tmp_path, *overrides)
    return info.value


def test_the_defaults(tmp_path: Path) -> None:
    config = cfg(tmp_path)
    upscale = config.upscale
    assert upscale.enabled is False and upscale.allow_fallback_resize is False
    assert (upscale.target_long_edge_px, upscale.target_aspect_ratio) == (3840, None)
    assert (upscale.model_name, upscale.tile_size, upscale.timeout_s) == (
        "realesrgan-x4plus",
        0,
        600.0,
    )
    assert config.effective_upscale_path == tmp_path / "images"
    assert cfg(tmp_path, "upscale.output_path=4k").effective_upscale_path == REPO / "4k"
    assert check_upscale(config, {}) is None  # disabled: nothing to check


@pytest.mark.parametrize(
    ("overrides", "key", "message"),
    [
        (["upscale.target_long_edge=4096"], "upscale.target_long_edge", "did you mean"),
        (["upscale.enabled=maybe"], "upscale.enabled", "true or false"),
        (["upscale.target_long_edge_px=0"], "upscale.target_long_edge_px", "16..8192"),
        (["upscale.target_long_edge_px=3840.0"], "upscale.target_long_edge_px", "a float"),
        (["upscale.target_width_px=3840"], "upscale.target_height_px", "both sides"),
        (["upscale.target_height_px=2160"], "upscale.target_width_px", "both sides"),
        (
            [
                "upscale.target_width_px=3840",
                "upscale.target_height_px=2160",
                "upscale.target_aspect_ratio=2",
            ],
            "upscale.target_aspect_ratio",
            "cannot be combined",
        ),
        (["upscale.target_aspect_ratio=0"], "upscale.target_aspect_ratio", "[0.1, 10]"),
        (["upscale.target_aspect_ratio='16:0'"], "upscale.target_aspect_ratio", "'W:H'"),
        (["upscale.target_aspect_ratio=[16, 9, 1]"], "upscale.target_aspect_ratio", "[W, H]"),
        (["upscale.target_aspect_ratio=wide"], "upscale.target_aspect_ratio", "ratio"),
        # YAML 1.1 reads an unquoted 16:9 as the base-60 int 969; the message says so.
        (["upscale.target_aspect_ratio=16:9"], "upscale.target_aspect_ratio", "quote it: '16:9'"),
        (
            ["upscale.target_long_edge_px=100", "upscale.target_aspect_ratio=10"],
            "upscale.target_aspect_ratio",
            "short edge 10 px",
        ),
        (["upscale.tile_size=16"], "upscale.tile_size", "32..4096"),
        (["upscale.engine=waifu2x"], "upscale.engine", "realesrgan-ncnn-vulkan"),
        (["upscale.model_name=../evil"], "upscale.model_name", "model file name"),
        (["upscale.timeout_s=0"], "upscale.timeout_s", "> 0"),
        (["upscale.realesrgan_binary=''"], "upscale.realesrgan_binary", "non-empty path"),
    ],
)
def test_bad_values_name_the_key(
    tmp_path: Path, overrides: list[str], key: str, message: str
) -> None:
    error = config_error(tmp_path, *overrides)
    assert error.key == key
    assert message in error.message


@pytest.mark.parametrize(
    ("value", "ratio"),
    [("'16:9'", 16 / 9), ("'9/16'", 9 / 16), ("1.78", 1.78), ("'2.35'", 2.35), ("[4, 3]", 4 / 3)],
)
def test_the_aspect_ratio_forms(tmp_path: Path, value: str, ratio: float) -> None:
    config = cfg(tmp_path, f"upscale.target_aspect_ratio={value}")
    assert config.upscale.target_aspect_ratio == pytest.approx(ratio)


def test_the_ratio_reads_from_a_yaml_file_too(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("upscale:\n  enabled: true\n  target_aspect_ratio: '21:9'\n", encoding="utf-8")
    config = load_config(root=REPO, env={}, config_path=path)
    assert config.upscale.target_aspect_ratio == pytest.approx(21 / 9)


# --------------------------------------------------------------------------- the pre-flight


def fake_binary(directory: Path, *, models: bool = True) -> Path:
    """An executable file standing in for the binary (never run here)."""
    directory.mkdir(parents=True, exist_ok=True)
    binary = directory / "realesrgan-ncnn-vulkan"
    binary.write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    if models:
        (directory / "models").mkdir(exist_ok=True)
        for suffix in (".param", ".bin"):
            (directory / "models" / f"realesrgan-x4plus{suffix}").write_bytes(b"w")
    return binary


def preflight_error(config: AppConfig, env: dict[str, str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        check_upscale(config, env or {})
    return info.value


def test_no_binary_without_the_fallback_is_refused_naming_the_key(tmp_path: Path) -> None:
    error = preflight_error(cfg(tmp_path, "upscale.enabled=true"))
    assert error.key == "upscale.realesrgan_binary"
    assert "no upscaler found" in error.message
    assert "a 1536x1024 image (image.size) needs it to reach 3840x2560" in error.message
    assert "upscale.allow_fallback_resize: true" in error.message
    auto = preflight_error(cfg(tmp_path, "upscale.enabled=true", "image.size=auto"))
    assert "image.size is auto" in auto.message


def test_no_binary_is_fine_with_the_fallback_or_when_none_is_needed(tmp_path: Path) -> None:
    fallback = check_upscale(
        cfg(tmp_path, "upscale.enabled=true", "upscale.allow_fallback_resize=true"), {}
    )
    assert fallback is not None and fallback.upscaler is None and fallback.allow_fallback
    assert fallback.target == UpscaleTarget(3840, None, None)
    assert fallback.directory == tmp_path / "images"
    # An image already as large as the target is copied or fitted down: no binary needed.
    for overrides in (
        ["image.size=4096x2304"],
        ["upscale.target_long_edge_px=1024", "upscale.target_aspect_ratio=1"],
    ):
        settings = check_upscale(cfg(tmp_path, "upscale.enabled=true", *overrides), {})
        assert settings is not None and settings.upscaler is None


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX execute bits")
def test_a_configured_path_that_does_not_exist_is_refused_even_with_the_fallback(
    tmp_path: Path,
) -> None:
    on = ("upscale.enabled=true", "upscale.allow_fallback_resize=true")
    error = preflight_error(cfg(tmp_path, *on, f"upscale.realesrgan_binary={tmp_path / 'nope'}"))
    assert error.key == "upscale.realesrgan_binary" and "does not exist" in error.message
    named = preflight_error(cfg(tmp_path, *on), {BINARY_ENV_VAR: str(tmp_path / "gone")})
    assert named.key == "upscale.realesrgan_binary" and BINARY_ENV_VAR in named.message
    binary = fake_binary(tmp_path / "bin")
    models = preflight_error(
        cfg(tmp_path, *on, f"upscale.realesrgan_binary={binary}", "upscale.model_path=nowhere")
    )
    assert models.key == "upscale.model_path" and "does not exist" in models.message
    found = check_upscale(cfg(tmp_path, "upscale.enabled=true"), {"PATH": str(binary.parent)})
    assert found is not None and found.upscaler is not None
    assert found.upscaler.binary == binary.resolve()


def test_the_4k_directory_is_checked_with_the_other_outputs(tmp_path: Path) -> None:
    (tmp_path / "a_file").write_text("x", encoding="utf-8")
    bad = cfg(tmp_path, "upscale.enabled=true", f"upscale.output_path={tmp_path / 'a_file'}")
    with pytest.raises(InputFileError, match=r"upscale\.output_path is not a writable directory"):
        check_outputs(bad)
    check_outputs(cfg(tmp_path, f"upscale.output_path={tmp_path / 'a_file'}"))  # off: unused
    check_outputs(cfg(tmp_path, "upscale.enabled=true", f"upscale.output_path={tmp_path / '4k'}"))
    assert (tmp_path / "4k").is_dir()
