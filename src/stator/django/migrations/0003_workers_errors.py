"""Read-only (unmanaged) models over Stator's own workers and errors tables, for the admin."""
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('stator', '0002_tasks'),
    ]

    operations = [
        migrations.CreateModel(
            name='StatorError',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('model', models.CharField(max_length=255)),
                ('row_pk', models.CharField(max_length=255)),
                ('state', models.CharField(max_length=100)),
                ('attempt', models.IntegerField()),
                ('kind', models.CharField(max_length=20)),
                ('message', models.TextField()),
                ('traceback', models.TextField()),
                ('created_at', models.DateTimeField()),
                ('worker_id', models.CharField(max_length=64)),
            ],
            options={
                'verbose_name': 'error',
                'db_table': 'stator_errors',
                'ordering': ('-id',),
                'managed': False,
            },
        ),
        migrations.CreateModel(
            name='StatorWorker',
            fields=[
                ('id', models.CharField(max_length=64, primary_key=True, serialize=False)),
                ('hostname', models.CharField(max_length=255)),
                ('pid', models.IntegerField()),
                ('started_at', models.DateTimeField()),
                ('last_seen', models.DateTimeField()),
                ('concurrency', models.IntegerField()),
                ('model_names', models.TextField(db_column='models', verbose_name='models')),
                ('threads', models.TextField()),
            ],
            options={
                'verbose_name': 'worker',
                'db_table': 'stator_workers',
                'ordering': ('-last_seen',),
                'managed': False,
            },
        ),
    ]
