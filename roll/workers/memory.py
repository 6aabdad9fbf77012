"""offload / reload of a role's engine state, called by the pipeline around the phases of colocated roles."""

from roll.distributed.decorator import Dispatch, register


class MemoryMixin:
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def offload(self) -> None:
        self.strategy.offload()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def reload(self) -> None:
        self.strategy.reload()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def offload_frees_memory(self) -> bool:
        return self.strategy.offload_frees_memory()
