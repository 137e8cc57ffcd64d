"""TrainJob ML policies: the env, ports and pod counts that wire a runtime's ranks together.

One plugin per ``mlPolicy`` kind, each with one method, ``apply``, run once over
the shared build state (``TrainJobInfo``) after the TrainJob's own settings were
applied, so the policy's variables are upserted last (users cannot set them: the
CRD rejects the reserved names). ``POLICIES`` lists them; the first whose field
the runtime's ``mlPolicy`` sets applies. What each sets is upstream's contract:

* torch: ``PET_NNODES``, ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK``,
  ``PET_MASTER_ADDR``, ``PET_MASTER_PORT`` for ``torchrun``, and port 29500
  (also in the runtime's ``envInjection`` containers); a ``tune run`` trainer
  gets its command completed instead of the address (``torchtune``);
* jax: ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID``, ``JAX_COORDINATOR_ADDRESS``;
* xgboost: the ``DMLC_*`` tracker settings;
* mpi: an SSH key Secret and a hostfile ConfigMap, mounted into launcher and
  nodes, plus the ``OMPI_MCA_*`` launcher settings;
* none (plain): only the pod count of the trainer.
"""

from __future__ import annotations

from typing import Protocol

from kubetrain.trainjob.policies.mpi import MPI
from kubetrain.trainjob.policies.rendezvous import Jax, Torch, XGBoost
from kubetrain.trainjob.state import TrainJobInfo


class MLPolicy(Protocol):
    name: str  # the field of ``mlPolicy`` that selects it

    def apply(self, info: TrainJobInfo) -> None: ...


POLICIES: tuple[MLPolicy, ...] = (Torch(), Jax(), XGBoost(), MPI())


def apply(info: TrainJobInfo) -> None:
    """Run the ML policy the runtime names, if any."""
    for policy in POLICIES:
        if info.ml_policy.get(policy.name) is not None:
            policy.apply(info)
            return
