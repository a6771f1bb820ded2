from django.db import migrations


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('stator', '0005_task_lease'),
    ]

    operations = [
        migrations.CreateModel(
            name='TaskProxy',
            fields=[
            ],
            options={
                'proxy': True,
                'indexes': [],
                'constraints': [],
            },
            bases=('stator.statortask',),
        ),
    ]
