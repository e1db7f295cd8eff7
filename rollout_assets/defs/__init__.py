"""The Dagster layer: partitions, resources, assets, checks, jobs and the sensor.

Thin and declarative: asset bodies call `rollout_assets.stages` and attach metadata;
`rollout_assets.definitions` is the one place that binds everything together.
"""
