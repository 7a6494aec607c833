"""How many model replicas, and what each holds: a fixed count or Ray Serve's autoscaling."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from llmflow.errors import InvalidParams


class Scaling(BaseModel):
    """The model deployment's replicas. A fixed `replicas`, or `min_replicas`..`max_replicas`
    scaled by Ray Serve on requests in progress per replica (`target_ongoing_requests`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    replicas: int | None = Field(None, ge=1, description="a fixed number of replicas (default 1)")
    min_replicas: int | None = Field(None, ge=0, description="autoscaling: replicas at least")
    max_replicas: int | None = Field(None, ge=1, description="autoscaling: replicas at most")
    target_ongoing_requests: float = Field(
        2.0, gt=0, description="autoscaling: requests in progress per replica that Ray Serve aims at"
    )
    look_back_period_s: float = Field(
        30.0, gt=0, description="autoscaling: the load is averaged over this window"
    )
    upscale_delay_s: float = Field(30.0, ge=0, description="autoscaling: load this long before adding")
    downscale_delay_s: float = Field(600.0, ge=0, description="autoscaling: idle this long before removing")
    cpus_per_replica: float | None = Field(
        None, gt=0, description="CPUs Ray reserves per replica; default: the model's threads, else 1"
    )
    gpus_per_replica: float = Field(0.0, ge=0, description="GPUs Ray reserves per replica")
    ingress_replicas: int = Field(1, ge=1, description="replicas of the ingress that relays HTTP")

    @model_validator(mode="after")
    def _one_way(self) -> Scaling:
        autoscaled = self.min_replicas is not None or self.max_replicas is not None
        if autoscaled and self.replicas is not None:
            raise ValueError("give replicas or min_replicas/max_replicas, not both")
        if autoscaled and (self.min_replicas is None or self.max_replicas is None):
            raise ValueError("autoscaling needs both min_replicas and max_replicas")
        if autoscaled and self.min_replicas > self.max_replicas:  # type: ignore[operator]
            raise ValueError(f"min_replicas {self.min_replicas} is over max_replicas {self.max_replicas}")
        return self

    @property
    def autoscaled(self) -> bool:
        return self.max_replicas is not None

    def deployment_options(self, threads: int | None) -> dict[str, Any]:
        """Ray Serve options of the model deployment: its replica count or autoscaling, and the
        resources each replica reserves."""
        cpus = self.cpus_per_replica or threads or 1
        options: dict[str, Any] = {"ray_actor_options": {"num_cpus": cpus, "num_gpus": self.gpus_per_replica}}
        if self.autoscaled:
            options["autoscaling_config"] = {
                "min_replicas": self.min_replicas,
                "initial_replicas": max(self.min_replicas or 0, 1),
                "max_replicas": self.max_replicas,
                "target_ongoing_requests": self.target_ongoing_requests,
                "look_back_period_s": self.look_back_period_s,
                "upscale_delay_s": self.upscale_delay_s,
                "downscale_delay_s": self.downscale_delay_s,
            }
        else:
            options["num_replicas"] = self.replicas or 1
        return options


def parse_autoscale(text: str) -> tuple[int, int]:
    """`MIN:MAX` of `--autoscale` (`1:4`)."""
    low, sep, high = text.partition(":")
    try:
        bounds = (int(low), int(high)) if sep else None
    except ValueError:
        bounds = None
    if bounds is None or bounds[0] < 0 or bounds[1] < max(bounds[0], 1):
        raise InvalidParams.single(
            "autoscale", f"expected MIN:MAX with 0 <= MIN <= MAX and MAX >= 1, got {text!r}"
        )
    return bounds
