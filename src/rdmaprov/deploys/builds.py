"""Builds declared in the inventory (`builds:`): a site's own programs, built once and shipped.

The same mechanism builds NCCL, nccl-tests and the gate's allreduce probe; here a user names the
source, the version and the build commands.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from pyinfra.api import deploy

from rdmaprov.builds.spec import BuildSpec, RecipeSettings, Source
from rdmaprov.engine.context import NodeContext
from rdmaprov.inventory.config import plain
from rdmaprov.operations.builds import (
    Recipe,
    S,
    artifact_broadcast,
    artifact_built,
    artifact_fetched,
    artifact_installed,
    declare,
)
from rdmaprov.parsers.node import Gpu
from rdmaprov.parsers.system import OsInfo


def build_and_ship(ctx: NodeContext, recipe: Recipe[S], what: str, settings: S | None) -> None:
    """The four steps of one build, planned on every host (settings None: not wanted here)."""
    declare(recipe, what, settings, wanted=not ctx.planned_only)
    name = recipe.name
    artifact_built(name=f"{what} built", recipe=name, slot=what, settings=settings)
    artifact_fetched(name=f"{what} fetched to the control machine", recipe=name, slot=what, settings=settings)
    artifact_broadcast(name=f"{what} sent by Slurm", recipe=name, slot=what, settings=settings)
    artifact_installed(name=f"{what} installed", recipe=name, slot=what, settings=settings)


def platform(os_info: OsInfo) -> tuple[str, str]:
    """The build input every native build shares: the distro release it was compiled on."""
    return ("os", f"{os_info.id}-{os_info.version_id}")


@dataclass(frozen=True)
class UserBuildSettings(RecipeSettings):
    """One entry of the node's `builds:` (its source's path made absolute) and where it stands."""

    OMITTED_WHEN_NONE: ClassVar[frozenset[str]] = frozenset({"prefix", "after_install"})

    name: str
    version: str
    source: Mapping[str, Any]
    build: str
    prefix: str | None
    after_install: str | None
    index: int  # its place in the list, for errors naming builds[N]

    @classmethod
    def of(cls, build: Mapping[str, Any], index: int, source: Mapping[str, Any]) -> UserBuildSettings:
        """builds[index] as the schema allows it written, with its `source` as given."""
        prefix, after = build.get("prefix"), build.get("after_install")
        return cls(build["name"], build["version"], source, build["build"], prefix, after, index)


def user_build(settings: UserBuildSettings, os_info: OsInfo, gpus: list[Gpu]) -> BuildSpec:
    source = settings.source
    index = settings.index
    return BuildSpec(
        name=settings.name,
        version=settings.version,
        source=Source(
            kind=source.get("kind", "file"),
            url=source.get("url", ""),
            ref=source.get("ref", ""),
            path=source.get("path", ""),
            sha256=source.get("sha256", ""),
            setting=f"builds[{index}].source",
        ),
        script=settings.build,
        prefix=settings.prefix or f"/opt/{settings.name}",
        inputs=(platform(os_info),),
        after_install=settings.after_install or "",
    )


USER_BUILD = Recipe("build", user_build)


def declared_builds(ctx: NodeContext) -> list[str]:
    """Every build name any host declares, so all hosts plan the same operations."""
    return sorted({b["name"] for spec in ctx.inventory.hosts.values() for b in spec.node.builds})


def build_settings(ctx: NodeContext, name: str) -> UserBuildSettings | None:
    for index, build in enumerate(ctx.node.builds):
        if build["name"] == name:
            source = plain(build["source"])
            if source.get("path"):
                source["path"] = ctx.local_path(source["path"])
            return UserBuildSettings.of(build, index, source)
    return None


@deploy("builds")
def builds(ctx: NodeContext) -> None:
    for name in declared_builds(ctx):
        build_and_ship(ctx, USER_BUILD, f"build {name}", build_settings(ctx, name))
