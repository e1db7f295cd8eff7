"""The Dagster layer: partitions, resources, assets, checks, jobs and sensors.

Thin and declarative: asset bodies call `rollout_assets.stages` and attach metadata; a
`RoundError` fails a step through `failures.py`; every question asked of the Dagster instance
is in `instance.py`; the sensor's decision is `rollout_assets.discovery`, outside Dagster.
`rollout_assets.definitions` is the one place that binds everything together.
"""
