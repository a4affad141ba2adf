"""llamaherd-cron: Trigger: cron expressions and intervals.

Only the hook lives here; the trigger code loads when the registry is built, so
``al --help`` stays fast.
"""

from llamaherd import hookimpl


@hookimpl
def register_trigger_types(register):
    from llamaherd_cron.trigger import CronTrigger

    register(CronTrigger())


@hookimpl
def describe_triggers(agent, now):
    from llamaherd_cron.trigger import describe_plan

    return describe_plan(agent, now)
