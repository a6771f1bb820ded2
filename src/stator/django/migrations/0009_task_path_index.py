# The index a claim under TASK_LIMITS alone finds each task path's due tasks by (issue 26).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('stator', '0008_tasks_running_to_ready'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='statortask',
            index=models.Index(
                condition=models.Q(('state_next__isnull', False)),
                fields=['state', 'task_path', 'state_next'], name='stator_tasks_task',
            ),
        ),
    ]
