"""One Spark-on-Ray session (RayDP) per process, started on first use and reused.

Why a module of its own: starting Spark through RayDP costs 20-40 s and ~2 GB, so the
cluster holds one session (in the Spark bridge process) and every merge job reuses it.
The settings that make RayDP work on JDK 17 and on a small machine live here, checked
before the JVM starts rather than discovered as a hang later (DESIGN.md §7):

- JDK 17 blocks the reflective access Spark and RayDP need: every JVM kind (driver,
  executors, RayDP's app master) gets Spark's `--add-opens` list.
- Python workers in the executors must run this interpreter (`PYSPARK_PYTHON`), and
  must not put their working directory first on `sys.path` (`PYTHONSAFEPATH`): run
  from a checkout, it would find the repository's `sediment/` directory before the
  installed package and miss `sediment.actors` (the branch tier's Spark tasks).
- Executors reserve 0 Ray CPUs (`spark.ray.raydp_spark_executor.actor.resource.cpu`),
  and at least one Ray CPU must stay free, or Spark jobs and Ray tasks deadlock.
- Quiet: no console progress, log4j at error.
- `stop_spark` returns before the old master is gone, so every start uses a new app name.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import uuid
from dataclasses import dataclass
from typing import Any

from sediment.log import get_logger

_log = get_logger("sediment.spark")

# Spark's own JDK 17 module options (org.apache.spark.launcher.JavaModuleOptions).
_OPENS = (
    "java.lang", "java.lang.invoke", "java.lang.reflect", "java.io", "java.net", "java.nio",
    "java.util", "java.util.concurrent", "java.util.concurrent.atomic", "jdk.internal.ref",
    "sun.nio.ch", "sun.nio.cs", "sun.security.action", "sun.util.calendar",
)
JAVA_OPTIONS = " ".join(
    ["-XX:+IgnoreUnrecognizedVMOptions", *(f"--add-opens=java.base/{p}=ALL-UNNAMED"
                                          for p in _OPENS),
     "-Djdk.reflect.useDirectMethodHandle=false"])

_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


class SparkUnavailable(RuntimeError):
    """Spark on Ray cannot start here (no Java 17, no free Ray CPU, RayDP failed)."""


@dataclass(frozen=True)
class SparkSettings:
    """How big the session is. The defaults fit a 2-core, 24 GB machine."""

    executors: int = 1
    executor_cores: int = 1
    executor_memory: str = "1g"
    driver_memory: str = "1g"
    shuffle_partitions: int = 4

    def __post_init__(self) -> None:
        if self.executors < 1 or self.executor_cores < 1:
            raise ValueError("a Spark session needs at least one executor with one core")
        if self.shuffle_partitions < 1:
            raise ValueError("shuffle_partitions must be positive")


def spark_configs(settings: SparkSettings) -> dict[str, str]:
    """The Spark configuration RayDP is started with (see the module docstring)."""
    log4j = os.path.join(tempfile.gettempdir(), "sediment-spark-log4j2.properties")
    if not os.path.exists(log4j):
        with open(log4j, "w") as f:
            f.write(_LOG4J)
    java = f"{JAVA_OPTIONS} -Dlog4j2.configurationFile=file:{log4j}"
    return {
        "spark.driver.extraJavaOptions": java,
        "spark.executor.extraJavaOptions": java,
        "spark.ray.raydp_app_master.extraJavaOptions": java,
        "spark.ray.raydp_spark_executor.actor.resource.cpu": "0",
        "spark.driver.memory": settings.driver_memory,
        "spark.ui.showConsoleProgress": "false",
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        "spark.executorEnv.PYTHONSAFEPATH": "1",
        "spark.log4j.config.file.name": log4j,
    }


def check_ray_cpus(ray: Any) -> None:
    """Refuse to start when Ray has no unreserved CPU: Spark would hang, not fail."""
    free = ray.available_resources().get("CPU", 0.0)
    if free < 1.0:
        raise SparkUnavailable(
            f"Ray has {free} free CPU; Spark on Ray needs at least one unreserved CPU "
            "(process actors must use num_cpus=0)")


_lock = threading.Lock()
_session: Any = None


def spark_session(settings: SparkSettings | None = None) -> Any:
    """This process's SparkSession on Ray, started on the first call."""
    global _session
    with _lock:
        if _session is not None:
            return _session
        import ray
        import raydp

        if not ray.is_initialized():
            raise SparkUnavailable("Ray is not initialized in this process")
        check_ray_cpus(ray)
        settings = settings or SparkSettings()
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ.pop("SPARK_HOME", None)
        app = f"sediment-{uuid.uuid4().hex[:8]}"
        _log.info("starting Spark on Ray", app=app, executors=settings.executors,
                  executor_memory=settings.executor_memory)
        try:
            _session = raydp.init_spark(
                app_name=app, num_executors=settings.executors,
                executor_cores=settings.executor_cores,
                executor_memory=settings.executor_memory,
                configs=spark_configs(settings))
        except Exception as exc:  # noqa: BLE001 - any start failure is "unavailable"
            raise SparkUnavailable(f"RayDP could not start Spark: {exc}") from exc
        _session.sparkContext.setLogLevel("ERROR")
        return _session


def stop_spark() -> None:
    """Stop this process's session (a later `spark_session` starts a new one)."""
    global _session
    with _lock:
        if _session is None:
            return
        import raydp

        _session = None
        raydp.stop_spark()


__all__ = ["JAVA_OPTIONS", "SparkSettings", "SparkUnavailable", "check_ray_cpus",
           "spark_configs", "spark_session", "stop_spark"]
