"""What a plan becomes for people and programs: the plan's JSON, the HTML report, launch commands."""
