# The index a claim under QUEUE_LIMITS finds each queue's due tasks by (issue 26).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('stator', '0005_task_lease'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='statortask',
            index=models.Index(
                condition=models.Q(('state_next__isnull', False)),
                fields=['state', 'queue_name', 'state_next'], name='stator_tasks_queue',
            ),
        ),
    ]
