"""A small Russian ops vault (notes holding English commands and names, as real ones do): the
gate has no measured calibration for Cyrillic. Read by tests/test_relevance_gate.py and by
bench/alphabets.py, so the test and the probe look at the same notes."""

RUSSIAN_NOTES = {
    "notes/backup.md": "# Резервные копии\n\nБазу данных копируем каждую ночь в 02:00 с помощью "
    "pg_dump. Копии хранятся 30 дней в S3.\n",
    "notes/deploy.md": "# Развёртывание\n\nВыкатываем по вторникам и четвергам. Откат: в Jenkins "
    "выбрать предыдущую сборку и нажать promote.\n",
    "notes/vpn.md": "# VPN\n\nЕсли VPN не подключается, сначала проверьте сертификат и время на "
    "ноутбуке.\n",
    "notes/coffee.md": "# Кофемашина\n\nКофемашину нужно чистить от накипи раз в месяц лимонной "
    "кислотой.\n",
    "notes/redis.md": "# Redis\n\nПолитика вытеснения allkeys-lru, maxmemory 4 ГБ. Не используйте "
    "FLUSHALL.\n",
    "notes/oncall.md": "# Дежурство\n\nЕсли ночью сработал алерт, сначала посмотрите дашборд, "
    "потом напишите в канал дежурных.\n",
}
