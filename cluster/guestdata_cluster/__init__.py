"""tap-guestdata's accounts DAG on a real Airflow CeleryExecutor, one network namespace per worker.

`scripts/cluster` (the CLI, `cli.py`) and the tests and benchmarks that drive it. The parts:

- `state`: what `up` made (`Cluster`, saved in `<home>/cluster.json`) and every process's settings;
- `processes`: started in sessions of their own, ended by group, found by their marker;
- `network`: the bridge, a namespace and address per worker, the forwarders;
- `services`: the PostgreSQL databases, the Redis db, the sandbox;
- `deploy`: the project copy and its plugins, the accounts and connections, the shared secrets;
- `rest`: Airflow's REST API (`Rest`);
- `stack`: up, the workers, down.
"""

from guestdata_cluster.deploy import default_accounts
from guestdata_cluster.network import require_namespaces
from guestdata_cluster.rest import Rest, task_key, task_label
from guestdata_cluster.state import DAG_ID, Cluster, ClusterError

__all__ = [
    "DAG_ID",
    "Cluster",
    "ClusterError",
    "Rest",
    "default_accounts",
    "require_namespaces",
    "task_key",
    "task_label",
]
