"""Builds declared in the inventory (`builds:`): a site's own programs, built once and shipped.

The same mechanism builds NCCL, nccl-tests and the gate's allreduce probe; here a user names the
source, the version and the build commands.
"""

from __future__ import annotations

from typing import Any

from pyinfra.api import deploy

from rdmaprov.builds.spec import BuildSpec, Source
from rdmaprov.engine.context import NodeContext
from rdmaprov.inventory.config import plain
from rdmaprov.operations.builds import Recipe, artifact_built, artifact_fetched, artifact_installed, declare
from rdmaprov.parsers.node import Gpu
from rdmaprov.parsers.system import OsInfo


def build_and_ship(ctx: NodeContext, recipe: Recipe, what: str, settings: dict[str, Any] | None) -> None:
    """The three steps of one build, planned on every host (settings None: not wanted here)."""
    declare(recipe, what, settings, wanted=not ctx.planned_only)
    name = recipe.name
    artifact_built(name=f"{what} built", recipe=name, slot=what, settings=settings)
    artifact_fetched(name=f"{what} fetched to the control machine", recipe=name, slot=what, settings=settings)
    artifact_installed(name=f"{what} installed", recipe=name, slot=what, settings=settings)


def platform(os_info: OsInfo) -> tuple[str, str]:
    """The build input every native build shares: the distro release it was compiled on."""
    return ("os", f"{os_info.id}-{os_info.version_id}")


def user_build(settings: dict[str, Any], os_info: OsInfo, gpus: list[Gpu]) -> BuildSpec:
    source = settings["source"]
    index = settings["index"]
    return BuildSpec(
        name=settings["name"],
        version=settings["version"],
        source=Source(
            kind=source.get("kind", "file"),
            url=source.get("url", ""),
            ref=source.get("ref", ""),
            path=source.get("path", ""),
            sha256=source.get("sha256", ""),
            setting=f"builds[{index}].source",
        ),
        script=settings["build"],
        prefix=settings.get("prefix") or f"/opt/{settings['name']}",
        inputs=(platform(os_info),),
        after_install=settings.get("after_install", ""),
    )


USER_BUILD = Recipe("build", user_build)


def declared_builds(ctx: NodeContext) -> list[str]:
    """Every build name any host declares, so all hosts plan the same operations."""
    return sorted({b["name"] for spec in ctx.inventory.hosts.values() for b in spec.node.builds})


def build_settings(ctx: NodeContext, name: str) -> dict[str, Any] | None:
    for index, build in enumerate(ctx.node.builds):
        if build["name"] == name:
            source = plain(build["source"])
            if source.get("path"):
                source["path"] = ctx.local_path(source["path"])
            return {**plain(build), "source": source, "index": index}
    return None


@deploy("builds")
def builds(ctx: NodeContext) -> None:
    for name in declared_builds(ctx):
        build_and_ship(ctx, USER_BUILD, f"build {name}", build_settings(ctx, name))
